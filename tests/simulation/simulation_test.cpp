// A seeded simulation: threads run random operations of every job through the fault proxy
// (lost, delayed and cut replies, refused and cut connections, error replies, on one
// server also a restart with AOF), retrying with the same ids as a careful host would;
// then the auditor checks every invariant against Redis and the reference model.
//
// LIMITCOUNTER_SIM_SEED=<n> replays a seed (the operations each thread draws and the faults
// each proxy draws; the interleaving of threads is the machine's); LIMITCOUNTER_SIM_SECONDS
// sets the length of each run (default 50 s).
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>

#include <unistd.h>

#include "simulation/auditor.hpp"
#include "simulation/workload.hpp"
#include "support/fault_proxy.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using namespace limitcounter;
using namespace limitcounter::simulation;
using testing::ClusterFaultProxy;
using testing::Fault;
using testing::FaultMix;
using testing::FaultProxy;
using testing::RedisCluster;
using testing::RedisServer;

namespace {

std::uint64_t simulation_seed() {
  if (const char* text = std::getenv("LIMITCOUNTER_SIM_SEED")) {
    return std::stoull(text);
  }
  return std::random_device{}();
}

std::chrono::seconds simulation_length() {
  const char* text = std::getenv("LIMITCOUNTER_SIM_SECONDS");
  return std::chrono::seconds{text != nullptr ? std::stol(text) : 50};
}

FaultMix fault_mix() {
  FaultMix mix;
  mix.probability = {{Fault::drop_reply, 0.01},     {Fault::delay_reply, 0.01},
                     {Fault::cut_mid_reply, 0.005}, {Fault::close_before_forward, 0.005},
                     {Fault::error_reply, 0.005},   {Fault::blackhole, 0.002}};
  mix.delay = 100ms;
  return mix;
}

RedisOptions client_options(RedisOptions options) {
  options.command_timeout = 250ms;
  options.breaker_pause = 50ms;
  return options;
}

const std::vector<Fault> fault_kinds{Fault::drop_reply,    Fault::delay_reply,
                                     Fault::cut_mid_reply, Fault::close_before_forward,
                                     Fault::error_reply,   Fault::blackhole};

// Connection-level faults while `workload` runs on its own thread: every ~1.5 s every
// connection is cut, or refused for 200 ms; `midway` runs once at half time. Runs on the
// calling thread, so that a server restarted by `midway` is the child of the test's main
// thread (a test server dies with the thread that started it). Returns the events.
long run_with_chaos(Workload& workload, std::uint64_t seed,
                    std::chrono::steady_clock::time_point deadline,
                    const std::function<void()>& cut_all, const std::function<void(bool)>& refuse,
                    const std::function<void()>& midway) {
  std::thread workers([&] { workload.run(4, deadline); });
  std::mt19937_64 random(seed ^ 0x5eedULL);
  const auto start = std::chrono::steady_clock::now();
  bool midway_done = false;
  long events = 0;
  while (std::chrono::steady_clock::now() + 2s < deadline) {
    std::this_thread::sleep_for(1500ms);
    ++events;
    if (!midway_done && std::chrono::steady_clock::now() - start > (deadline - start) / 2) {
      midway_done = true;
      midway();
    } else if (random() % 2 == 0) {
      cut_all();
    } else {
      refuse(true);
      cut_all();
      std::this_thread::sleep_for(200ms);
      refuse(false);
    }
  }
  workers.join();
  return events;
}

void print_report(const char* topology, std::uint64_t seed, const WorkloadStats& stats,
                  const std::map<Fault, std::size_t>& faults, long chaos_events,
                  const AuditReport& report) {
  std::printf("simulation %s seed=%llu (LIMITCOUNTER_SIM_SEED=%llu replays it)\n", topology,
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  std::printf("simulation %s operations:", topology);
  long total = 0;
  for (const auto& [kind, count] : stats.operations) {
    std::printf(" %s=%ld", kind.c_str(), count.load());
    total += count.load();
  }
  std::printf(" total=%ld calls=%ld retries=%ld unknown_outcomes=%ld\n", total,
              stats.retries.calls.load(), stats.retries.retries.load(),
              stats.retries.unknown_outcomes.load());
  std::printf("simulation %s faults:", topology);
  for (const auto& [fault, count] : faults) {
    std::printf(" %s=%zu", testing::to_string(fault), count);
  }
  std::printf(" connection_events=%ld\n", chaos_events);
  std::printf("simulation %s audit: %ld invariants checked, %zu broken\n", topology, report.checks,
              report.failures.size());
  std::fflush(stdout);
}

void require_clean(const AuditReport& report) {
  CHECK(report.checks > 0);
  for (const auto& failure : report.failures) {
    UNSCOPED_INFO(failure);
  }
  CHECK(report.failures.empty());
}

std::vector<std::string> expiring_patterns(const std::string& prefix) {
  return {prefix + "lim:*", prefix + "wal:*:o:*", prefix + "rp:*:p:*"};
}

} // namespace

TEST_CASE("simulation on one server: faults, a restart with AOF, every invariant audited",
          "[simulation]") {
  const std::uint64_t seed = simulation_seed();
  std::printf("simulation standalone seed=%llu\n", static_cast<unsigned long long>(seed));
  const auto dir =
      std::filesystem::temp_directory_path() / ("limitcounter-sim-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  {
    RedisServer server({"--appendonly", "yes", "--appendfsync", "always", "--dir", dir.string()});
    FaultProxy proxy(server);
    const std::string prefix = "sim:";
    Universe universe;
    ReferenceModel model;
    WorkloadStats stats;
    Jobs jobs(Redis(client_options(proxy.options())), prefix, universe);
    Workload workload(jobs, universe, model, stats, seed, /*race_ids=*/true);
    proxy.schedule(seed, fault_mix());

    const long chaos_events = run_with_chaos(
        workload, seed, std::chrono::steady_clock::now() + simulation_length(),
        [&] { proxy.cut_all(); }, [&](bool refuse) { proxy.refuse_connections(refuse); },
        [&] { server.restart(); });
    proxy.clear();

    std::map<Fault, std::size_t> faults;
    for (const Fault fault : fault_kinds) {
      faults[fault] = proxy.injected(fault);
    }
    Redis direct(server.options());
    Jobs audited(direct, prefix, universe);
    const AuditReport report = audit(audited, universe, model, {direct}, expiring_patterns(prefix));
    print_report("standalone", seed, stats, faults, chaos_events, report);
    require_clean(report);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("simulation on a 3-master cluster: faults on every node, every invariant audited",
          "[simulation][cluster]") {
  const std::uint64_t seed = simulation_seed();
  std::printf("simulation cluster seed=%llu\n", static_cast<unsigned long long>(seed));
  RedisCluster cluster(3);
  ClusterFaultProxy proxies(cluster);
  const std::string prefix = "sim:";
  Universe universe;
  ReferenceModel model;
  WorkloadStats stats;
  Jobs jobs(Redis(client_options(proxies.options())), prefix, universe);
  Workload workload(jobs, universe, model, stats, seed, /*race_ids=*/true);
  std::uint64_t node_seed = seed;
  for (RedisServer* node : cluster.nodes()) {
    proxies.proxy_of(*node).schedule(++node_seed, fault_mix());
  }

  const auto refuse_all = [&](bool refuse) {
    for (RedisServer* node : cluster.nodes()) {
      proxies.proxy_of(*node).refuse_connections(refuse);
    }
  };
  const long chaos_events = run_with_chaos(
      workload, seed, std::chrono::steady_clock::now() + simulation_length(),
      [&] { proxies.cut_all(); }, refuse_all, [&] { proxies.cut_all(); });

  std::map<Fault, std::size_t> faults;
  std::vector<Redis> nodes;
  for (RedisServer* node : cluster.nodes()) {
    FaultProxy& proxy = proxies.proxy_of(*node);
    proxy.clear();
    for (const Fault fault : fault_kinds) {
      faults[fault] += proxy.injected(fault);
    }
    nodes.emplace_back(node->options());
  }
  Jobs audited(Redis(cluster.options()), prefix, universe);
  const AuditReport report = audit(audited, universe, model, nodes, expiring_patterns(prefix));
  print_report("cluster", seed, stats, faults, chaos_events, report);
  require_clean(report);
}
