// A seeded simulation: threads run random operations of every job through the fault proxy
// (lost, delayed and cut replies, refused and cut connections, error replies; on one server
// also a restart with AOF; on a cluster also slots migrated key by key while the workload runs
// and a master failing over to its replica), retrying with the same ids as a careful host
// would; then the auditor checks every invariant against Redis and the reference model.
//
// LIMITCOUNTER_SIM_SEED=<n> replays a seed (the operations each thread draws and the faults
// each proxy draws; the interleaving of threads is the machine's); LIMITCOUNTER_SIM_SECONDS
// sets the length of each run (default 50 s).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>

#include <unistd.h>

#include "redis/key_slot.hpp"
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

// One kind of chaos: its name in the report and what it does.
struct ChaosEvent {
  std::string name;
  std::function<void()> run;
};
using ChaosCounts = std::map<std::string, long>;

// Chaos while `workload` runs on its own thread: every ~1.5 s one of `events` (drawn with the
// seed), and `midway` once at half time. Runs on the calling thread, so that a server restarted
// by an event is the child of the test's main thread (a test server dies with the thread that
// started it). Returns how often each event ran.
ChaosCounts run_with_chaos(Workload& workload, std::uint64_t seed,
                           std::chrono::steady_clock::time_point deadline,
                           const std::vector<ChaosEvent>& events, const ChaosEvent& midway) {
  std::thread workers([&] { workload.run(4, deadline); });
  std::mt19937_64 random(seed ^ 0x5eedULL);
  const auto start = std::chrono::steady_clock::now();
  bool midway_done = false;
  ChaosCounts counts;
  try {
    while (std::chrono::steady_clock::now() + 2s < deadline) {
      std::this_thread::sleep_for(1500ms);
      const ChaosEvent* event = &events[random() % events.size()];
      if (!midway_done && std::chrono::steady_clock::now() - start > (deadline - start) / 2) {
        midway_done = true;
        event = &midway;
      }
      event->run();
      ++counts[event->name];
    }
  } catch (...) {
    workers.join(); // a joinable thread's destructor would end the process
    throw;
  }
  workers.join();
  return counts;
}

// Cuts every connection, or refuses new ones for 200 ms and cuts the open ones.
std::vector<ChaosEvent> connection_events(const std::function<void()>& cut_all,
                                          const std::function<void(bool)>& refuse) {
  return {{"cut_all", cut_all}, {"refuse_connections", [cut_all, refuse] {
                                   refuse(true);
                                   cut_all();
                                   std::this_thread::sleep_for(200ms);
                                   refuse(false);
                                 }}};
}

void print_report(const char* topology, std::uint64_t seed, const WorkloadStats& stats,
                  const std::map<Fault, std::size_t>& faults, const ChaosCounts& chaos,
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
  std::printf("\nsimulation %s chaos:", topology);
  for (const auto& [event, count] : chaos) {
    std::printf(" %s=%ld", event.c_str(), count);
  }
  std::printf("\n");
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

// A slot that holds the workload's keys: one of `hot` (drawn), or of the slots of 8 random keys
// of a random master the one with the most keys (a wallet's or red packets' partition more often
// than the one home record of a transaction).
int pick_workload_slot(const RedisCluster& cluster, std::mt19937_64& random,
                       const std::vector<int>& hot) {
  if (random() % 2 == 0) {
    return hot[random() % hot.size()];
  }
  const std::vector<RedisServer*> masters = cluster.masters();
  RedisOptions options = masters[random() % masters.size()]->options();
  options.pool_size = 1;
  Redis node(options);
  int best = hot.front();
  std::int64_t most = 0;
  for (int i = 0; i < 8; ++i) {
    const Reply key = node.command({"RANDOMKEY"});
    if (key.is_nil()) {
      break;
    }
    const int slot = detail::key_slot(key.as_string());
    const std::int64_t keys =
        node.command({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)}).as_integer();
    if (keys > most) {
      best = slot;
      most = keys;
    }
  }
  return best;
}

// Moves `slot` to another master key by key while the workload runs, as a resharding does:
// IMPORTING/MIGRATING, MIGRATE batches of 1 to 20 keys with short pauses for about 2 s (calls
// meet the slot half moved: ASK, TRYAGAIN), then the rest in full batches and the hand-over.
void migrate_key_by_key(const RedisCluster& cluster, int slot, std::mt19937_64& random) {
  RedisServer& source = cluster.owner_of(slot);
  std::vector<RedisServer*> targets;
  for (RedisServer* node : cluster.masters()) {
    if (node->port() != source.port()) {
      targets.push_back(node);
    }
  }
  RedisServer& target = *targets.at(random() % targets.size());
  const auto start = std::chrono::steady_clock::now();
  std::size_t keys = 0;
  long batches = 0;
  cluster.begin_migration(slot, source, target);
  for (std::vector<std::string> found = cluster.keys_in_slot(slot, source); !found.empty();
       found = cluster.keys_in_slot(slot, source)) {
    const bool slowly = std::chrono::steady_clock::now() - start < 2s;
    for (std::size_t at = 0; at < found.size(); ++batches) {
      const std::size_t size = slowly ? 1 + random() % 20 : found.size();
      const std::vector<std::string> batch(
          found.begin() + static_cast<std::ptrdiff_t>(at),
          found.begin() + static_cast<std::ptrdiff_t>(std::min(at + size, found.size())));
      cluster.move_some_keys(batch, source, target);
      at += batch.size();
      keys += batch.size();
      if (slowly) {
        std::this_thread::sleep_for(std::chrono::milliseconds(random() % 30));
      }
    }
  }
  cluster.finish_migration(slot, target);
  std::printf("simulation cluster chaos: slot %d moved from port %d to port %d, %zu keys in %ld "
              "MIGRATE batches\n",
              slot, source.port(), target.port(), keys, batches);
  std::fflush(stdout);
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

    const ChaosCounts chaos =
        run_with_chaos(workload, seed, std::chrono::steady_clock::now() + simulation_length(),
                       connection_events([&] { proxy.cut_all(); },
                                         [&](bool refuse) { proxy.refuse_connections(refuse); }),
                       {"restart", [&] { server.restart(); }});
    proxy.clear();

    std::map<Fault, std::size_t> faults;
    for (const Fault fault : fault_kinds) {
      faults[fault] = proxy.injected(fault);
    }
    Redis direct(server.options());
    Jobs audited(direct, prefix, universe);
    const AuditReport report = audit(audited, universe, model, {direct}, expiring_patterns(prefix));
    print_report("standalone", seed, stats, faults, chaos, report);
    require_clean(report);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("simulation on a 3-master cluster: faults on every node, slots migrated key by key, "
          "a failover, every invariant audited",
          "[simulation][cluster]") {
  const std::uint64_t seed = simulation_seed();
  std::printf("simulation cluster seed=%llu\n", static_cast<unsigned long long>(seed));
  RedisCluster cluster(3, 1);
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
  std::vector<ChaosEvent> events = connection_events([&] { proxies.cut_all(); }, refuse_all);
  std::mt19937_64 chaos_random(seed ^ 0x5107ULL);
  const int merchant_slot = detail::key_slot(jobs.limits.keys().tag("merchant", "m0"));
  const int channel_slot = detail::key_slot(jobs.limits.keys().tag("channel", "Ali"));
  events.push_back(
      {"migrate_slot", [&] {
         // the slots of the limits' counters and shares, or the slot of a random
         // key (a wallet, a red packet, a home record)
         const int slot = pick_workload_slot(cluster, chaos_random, {merchant_slot, channel_slot});
         migrate_key_by_key(cluster, slot, chaos_random);
       }});
  // The sweep with no age, from a host of its own whose network is sound: it abandons every
  // transaction whose callers are between begin and finish at that moment (retrying through
  // the faults, or about to finish), and finishes every fan-out that its callers are finishing
  // too. The auditor then finds every counter as the callers were told (an abandoned
  // transaction counts nothing).
  Jobs sweeper(Redis(cluster.options()), prefix, universe);
  long abandoned_by_sweep = 0;
  long fan_outs_finished = 0;
  long sweeps = 0;
  events.push_back({"sweep", [&] {
                      const auto swept = call_until_definite(stats.retries, [&] {
                        return sweeper.limits.finish_interrupted(0s, 1000);
                      });
                      ++sweeps;
                      for (const InterruptedFanOut& each : swept) {
                        ++(each.abandoned ? abandoned_by_sweep : fan_outs_finished);
                      }
                    }});
  const ChaosEvent failover{"failover", [&] {
                              RedisServer& master = cluster.owner_of(merchant_slot);
                              const RedisServer& promoted = cluster.fail_over(master);
                              std::printf("simulation cluster chaos: the master of slot %d on "
                                          "port %d failed over to its replica on port %d\n",
                                          merchant_slot, master.port(), promoted.port());
                              std::fflush(stdout);
                            }};
  const ChaosCounts chaos = run_with_chaos(
      workload, seed, std::chrono::steady_clock::now() + simulation_length(), events, failover);

  std::map<Fault, std::size_t> faults;
  for (RedisServer* node : cluster.nodes()) {
    FaultProxy& proxy = proxies.proxy_of(*node);
    proxy.clear();
    for (const Fault fault : fault_kinds) {
      faults[fault] += proxy.injected(fault);
    }
  }
  std::vector<Redis> masters;
  for (RedisServer* node : cluster.masters()) {
    masters.emplace_back(node->options());
  }
  Jobs audited(Redis(cluster.options()), prefix, universe);
  const AuditReport report = audit(audited, universe, model, masters, expiring_patterns(prefix));
  print_report("cluster", seed, stats, faults, chaos, report);
  std::printf("simulation cluster sweep: %ld sweeps, %ld transactions abandoned, %ld fan-outs "
              "finished\n",
              sweeps, abandoned_by_sweep, fan_outs_finished);
  // the servers' side of the migrations: calls redirected by ASK, scripts refused by TRYAGAIN
  std::int64_t asking = 0;
  std::int64_t tryagain = 0;
  for (RedisServer* node : cluster.nodes()) {
    asking += testing::info_count(*node, "commandstats", "cmdstat_asking:calls=");
    tryagain += testing::info_count(*node, "errorstats", "errorstat_TRYAGAIN:count=");
  }
  std::printf("simulation cluster servers: ASKING=%lld TRYAGAIN=%lld\n",
              static_cast<long long>(asking), static_cast<long long>(tryagain));
  require_clean(report);
}
