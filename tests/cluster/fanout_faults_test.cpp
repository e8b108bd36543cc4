// A transaction spread over three cluster slots (its home record and two shares) with a fault at
// each step of its fan-out: the master of that step's slot killed (SIGKILL) while the step is
// held by the fault proxy, or after the step ran and reached its replica; or the step's slot half
// migrated to another master (ASK) and then handed over. After each fault the host retries with
// the same id until the call returns, and the servers say: every share and the home record
// agree, the counters moved exactly once, no share is left half applied.
//
// One cluster with a replica per master serves the whole file; a killed master comes back as
// the replica of the node that took over, so every step finds a replica to fail over to.
#include <catch2/catch.hpp>

#include <string>
#include <thread>
#include <vector>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/limitcounter.hpp>

#include "redis/key_slot.hpp"
#include "support/fault_proxy.hpp"
#include "support/probe.hpp"
#include "support/redis_cluster.hpp"

using namespace std::chrono_literals;
using namespace limitcounter;
using namespace limitcounter::testing;

namespace {

enum class Op { consume, confirm, cancel, refund };
enum class Target { home, dept, merchant };

// One step of a fan-out: the `nth` script call on `target`'s key during `op`.
struct Step {
  const char* name;
  Op op;
  Target target;
  int nth;
};

// Confirm, cancel and refund are decided at the home record and then followed by each share
// (a refund's share gets a catch-up confirm first, then the refund: its second call).
const std::vector<Step> steps{
    {"consume: home begin", Op::consume, Target::home, 1},
    {"consume: dept share", Op::consume, Target::dept, 1},
    {"consume: merchant share", Op::consume, Target::merchant, 1},
    {"consume: home finish", Op::consume, Target::home, 2},
    {"confirm: home transition", Op::confirm, Target::home, 1},
    {"confirm: dept share", Op::confirm, Target::dept, 1},
    {"confirm: merchant share", Op::confirm, Target::merchant, 1},
    {"cancel: home transition", Op::cancel, Target::home, 1},
    {"cancel: dept share", Op::cancel, Target::dept, 1},
    {"cancel: merchant share", Op::cancel, Target::merchant, 1},
    {"refund: home transition", Op::refund, Target::home, 1},
    {"refund: dept share", Op::refund, Target::dept, 2},
    {"refund: merchant share", Op::refund, Target::merchant, 2},
};

// Every payment holds or consumes this much; a confirm keeps `confirmed`; a refund gives back
// `refunded`.
constexpr std::int64_t amount = 100;
constexpr std::int64_t confirmed = 60;
constexpr std::int64_t refunded = 40;

RedisCluster& replicated_cluster() {
  static RedisCluster cluster(3, 1);
  return cluster;
}

std::string info_field(const RedisServer& node, const std::string& section,
                       const std::string& name) {
  RedisOptions options = node.options();
  options.pool_size = 1;
  const std::string info = Redis(options).command({"INFO", section}).as_string();
  const auto at = info.find(name + ":");
  if (at == std::string::npos) {
    return {};
  }
  const auto start = at + name.size() + 1;
  return info.substr(start, info.find_first_of("\r\n", start) - start);
}

struct FanOutFaults {
  RedisCluster& cluster = replicated_cluster();
  ClusterFaultProxy proxies{cluster};
  std::string prefix = unique_prefix() + "ff:";
  Redis through{[this] {
    RedisOptions options = proxies.options();
    options.command_timeout = 300ms;
    options.connect_timeout = 200ms;
    options.breaker_failures = 0;   // every retry reaches the cluster
    options.retry.max_attempts = 1; // the host's retry finishes the fan-out, not a resend
    return options;
  }()};
  Redis direct{cluster.options()};
  LimitCounter limits{through, Calendar("UTC"), counter_options()};
  LimitCounter reader{direct, Calendar("UTC"), counter_options()};

  FanOutFaults() {
    REQUIRE(detail::key_slot("{dept}") != detail::key_slot("{merchant}"));
    const RuleSet rules =
        RuleSet()
            .add(Rule("dept-day").where("dept").per(Period::day).max_amount(1'000'000))
            .add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(1'000'000));
    limits.set_rules(rules);
    reader.set_rules(rules);
    settled();
  }

  LimitCounterOptions counter_options() const {
    LimitCounterOptions options;
    options.key_prefix = prefix;
    return options;
  }

  // Each step has its own id and its own dimensions, so its counters are its own.
  static Transaction tx(const std::string& id) {
    return Transaction{id, {{"merchant", "m-" + id}, {"dept", "d-" + id}}, amount};
  }
  Usage usage_of(const std::string& shape, const std::string& id) {
    return reader.usage(shape, Dimension{shape.substr(0, 1) + "-" + id}, Period::day);
  }
  std::string home(const std::string& id) const { return prefix + "tx:{" + id + "}"; }
  std::string share(const std::string& shape, const std::string& id) const {
    return prefix + "{" + shape + "}:tx:" + id;
  }
  std::string key_of(Target target, const std::string& id) const {
    return target == Target::home ? home(id)
                                  : share(target == Target::dept ? "dept" : "merchant", id);
  }
  std::string field(const std::string& key, const std::string& name) {
    return testing::record_field(direct, key, name);
  }

  // What comes before the step's operation: a reservation to confirm or cancel, a payment to
  // refund.
  void prepare(const Step& step, const std::string& id) {
    if (step.op == Op::confirm || step.op == Op::cancel) {
      REQUIRE(limits.reserve(tx(id)).allowed());
    } else if (step.op == Op::refund) {
      REQUIRE(limits.consume(tx(id)).allowed());
    }
  }

  // The step's operation once; true when this call was the first to apply it.
  bool run(const Step& step, const std::string& id) {
    switch (step.op) {
    case Op::consume: {
      const Decision decision = limits.consume(tx(id));
      CHECK(decision.allowed());
      return !decision.replayed;
    }
    case Op::confirm: {
      const ConfirmResult result = limits.confirm(id, confirmed);
      CHECK(result.amount == confirmed);
      return !result.replayed;
    }
    case Op::cancel: {
      const CancelResult result = limits.cancel(id);
      return result.status == CancelResult::Status::cancelled && !result.replayed;
    }
    case Op::refund: {
      const RefundResult result = limits.refund(id, refunded, "r1");
      CHECK(result.refunded_now == refunded);
      return !result.replayed;
    }
    }
    return false;
  }

  // Sends the step's operation again, as a host does after Outcome::unknown or not_sent, until
  // it returns; how many of the calls that returned were the first to apply it.
  int retry_until_done(const Step& step, const std::string& id) {
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    for (retries = 1;; ++retries) {
      try {
        return run(step, id) ? 1 : 0;
      } catch (const Error& e) {
        INFO("retry: " << e.what());
        REQUIRE_FALSE(e.is_input_error());
        REQUIRE(std::chrono::steady_clock::now() < deadline);
        std::this_thread::sleep_for(100ms);
      }
    }
  }

  int retries = 0; // how many calls the last retry_until_done made

  // A first script call answered NOSCRIPT (or "Function not found") did not run and is sent again,
  // which would spend a fault rule meant for the call that runs: every node (a promoted replica or
  // a restarted node has an empty script cache) gets every script first. The runtime settings (lost
  // by a restart) keep the file fast: a failover after 1 s of silence, and a replica's full sync at
  // once instead of after the 5 s a master waits for more replicas to share a diskless transfer.
  void prepare_nodes() {
    cluster.load_scripts();
    for (RedisServer* node : cluster.nodes()) {
      Redis node_direct(node->options());
      node_direct.command(
          {"CONFIG", "SET", "cluster-node-timeout", "1000", "repl-diskless-sync-delay", "0"});
    }
  }

  // Whether the step's own write is on the server.
  bool step_written(const Step& step, const std::string& id) {
    const std::string key = key_of(step.target, id);
    switch (step.op) {
    case Op::consume:
      return step.target == Target::home && step.nth == 2
                 ? field(key, "state") != "pending"
                 : direct.command({"EXISTS", key}).as_integer() == 1;
    case Op::confirm: return field(key, "state") == "confirmed";
    case Op::cancel: return field(key, "state") == "cancelled";
    case Op::refund: return field(key, "refunded") == std::to_string(refunded);
    }
    return false;
  }

  // The servers after the fault and the retries: the home record and every share agree, and
  // the counters moved exactly once; the next call replays.
  void check_agreement(const Step& step, const std::string& id, int first_callers) {
    const std::string state = step.op == Op::consume || step.op == Op::refund ? "consumed"
                              : step.op == Op::confirm                        ? "confirmed"
                                                                              : "cancelled";
    const Usage expected = step.op == Op::consume   ? Usage{1, amount}
                           : step.op == Op::confirm ? Usage{1, confirmed}
                           : step.op == Op::cancel  ? Usage{0, 0}
                                                    : Usage{1, amount - refunded};
    const std::string refunded_total = step.op == Op::refund ? std::to_string(refunded) : "0";
    CHECK(field(home(id), "state") == state);
    CHECK(field(home(id), "refunded") == refunded_total);
    for (const std::string shape : {"dept", "merchant"}) {
      INFO("share " << shape);
      CHECK(field(share(shape, id), "state") == state);
      CHECK(field(share(shape, id), "refunded") == refunded_total);
      CHECK(usage_of(shape, id) == expected);
    }
    // the caller that did it first may be the one that lost its reply
    CHECK(first_callers <= 1);
    CHECK_FALSE(run(step, id));
  }

  // Waits until every running node says the cluster is ok and agrees on who serves `slots`,
  // and every master has its replica linked.
  void settled() {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    const auto ready = [&] {
      try {
        int linked = 0;
        for (RedisServer* node : cluster.nodes()) {
          if (node->pid() <= 0) {
            return false;
          }
          if (info_field(*node, "replication", "role") == "slave") {
            linked += info_field(*node, "replication", "master_link_status") == "up" ? 1 : 0;
          }
          RedisOptions options = node->options();
          options.pool_size = 1;
          if (Redis(options).command({"CLUSTER", "INFO"}).as_string().find("cluster_state:ok") ==
              std::string::npos) {
            return false;
          }
        }
        return linked == 3;
      } catch (const Error&) {
        return false;
      }
    };
    prepare_nodes();
    while (!ready()) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      std::this_thread::sleep_for(50ms);
    }
    prepare_nodes();
  }

  // The node replicating `master`.
  RedisServer& replica_of(const RedisServer& master) {
    for (RedisServer* node : cluster.nodes()) {
      if (info_field(*node, "replication", "role") == "slave" &&
          info_field(*node, "replication", "master_port") == std::to_string(master.port())) {
        return *node;
      }
    }
    FAIL("no replica of the master on port " << master.port());
    throw std::logic_error("unreachable");
  }

  // Makes `replica` the master of its master's slots now, without the other masters' votes (as
  // an operator does with a master that is gone).
  void promote(RedisServer& replica) {
    RedisOptions options = replica.options();
    options.pool_size = 1;
    REQUIRE(Redis(options).command({"CLUSTER", "FAILOVER", "TAKEOVER"}).as_string() == "OK");
  }

  // Makes the replica of `master` hold every write `master` has acknowledged: a write of our
  // own on the master, then WAIT on the same connection (replication keeps the order).
  void replicated(RedisServer& master, const std::string& tag) {
    RedisOptions options = master.options();
    options.pool_size = 1;
    Redis node(options);
    REQUIRE(node.command({"SET", prefix + "sync{" + tag + "}", "1"}).as_string() == "OK");
    REQUIRE(node.command({"WAIT", "1", "5000"}).as_integer() == 1);
  }

  // The proxy of the node serving `key`: after `nth - 1` script calls on it are forwarded,
  // the next gets `fault`.
  FaultProxy& fault_at(const std::string& key, int nth, Fault fault) {
    FaultProxy& proxy = proxies.proxy_of(cluster.owner_of(detail::key_slot(key)));
    if (nth > 1) {
      proxy.add_rule({script_call_with_key_prefix(key), Fault::forward, nth - 1});
    }
    proxy.add_rule({script_call_with_key_prefix(key), fault});
    return proxy;
  }
};

// The hash tag of a key: what decides its slot.
std::string tag_of(const std::string& key) {
  const auto open = key.find('{');
  return key.substr(open + 1, key.find('}', open) - open - 1);
}

} // namespace

TEST_CASE_METHOD(FanOutFaults, "a master killed at each step of a fan-out: the retry finishes it",
                 "[cluster][proxy][home][failover]") {
  int n = 0;
  for (const Step& step : steps) {
    // Odd steps: the node dies with the step held at its proxy (it never ran). Even steps: the
    // step ran and its replica holds it, then the node dies before its reply left.
    const bool ran = n % 2 == 1;
    const std::string id = "kill" + std::to_string(n++) + "-";
    INFO(step.name << (ran ? ", killed after it ran" : ", killed before it ran"));
    prepare(step, id);
    const std::string key = key_of(step.target, id);
    RedisServer& master = cluster.owner_of(detail::key_slot(key));
    const Fault fault = ran ? Fault::drop_reply : Fault::blackhole;
    FaultProxy& proxy = fault_at(key, step.nth, fault);
    const std::size_t injected = proxy.injected(fault);
    CHECK(error_of([&] { run(step, id); }).outcome() == Outcome::unknown);
    CHECK(proxy.injected(fault) == injected + 1);
    CHECK(step_written(step, id) == ran);
    // what the master acknowledged before the fault is on its replica: a failover loses none
    // of it (see docs/ARCHITECTURE.md on writes lost by asynchronous replication)
    replicated(master, tag_of(key));
    proxy.clear();
    RedisServer& replica = replica_of(master);
    master.kill();
    // The replica takes over at once instead of after the cluster's failure detection and
    // election (seconds a step; "a master fails over to its replica" waits for those): the
    // library sees the same dead node and moved slots either way.
    promote(replica);
    const int first = retry_until_done(step, id);
    // The first call to fail on the gone node teaches the library the new owner (300 calls
    // would fail here until its slot map went stale, 30 s later).
    CHECK(retries <= 5);
    master.restart(); // it comes back as the replica of the node that took over
    settled();
    CHECK(&cluster.owner_of(detail::key_slot(key)) != &master);
    check_agreement(step, id, first);
  }
}

TEST_CASE_METHOD(FanOutFaults,
                 "a slot migrating at each step of a fan-out: ASK, then the retry finishes it",
                 "[cluster][proxy][home][migration]") {
  int n = 0;
  for (const Step& step : steps) {
    INFO(step.name);
    const std::string id = "move" + std::to_string(n++) + "-";
    prepare(step, id);
    const std::string key = key_of(step.target, id);
    const int slot = detail::key_slot(key);
    RedisServer& source = cluster.owner_of(slot);
    // the step runs on its node and its reply is lost; then the slot starts to move
    FaultProxy& proxy = fault_at(key, step.nth, Fault::drop_reply);
    const std::size_t dropped = proxy.injected(Fault::drop_reply);
    CHECK(error_of([&] { run(step, id); }).outcome() == Outcome::unknown);
    CHECK(proxy.injected(Fault::drop_reply) == dropped + 1);
    CHECK(step_written(step, id));
    proxy.clear();

    RedisServer* target = nullptr;
    for (RedisServer* node : cluster.nodes()) {
      if (node != &source && info_field(*node, "replication", "role") == "master") {
        target = node;
        break;
      }
    }
    REQUIRE(target != nullptr);
    cluster.begin_migration(slot, source, *target);
    cluster.move_keys(slot, source, *target);
    Redis target_direct(target->options());
    const long long asked = command_calls(target_direct, "asking");
    // half migrated: the step's keys are on the target, so its node answers ASK; a script whose
    // keys are not all there yet is refused with TRYAGAIN (nothing runs) until the slot is
    // handed over
    int first = 0;
    try {
      first += run(step, id) ? 1 : 0;
    } catch (const Error& e) {
      INFO(e.what());
      CHECK_FALSE(e.is_input_error());
    }
    CHECK(command_calls(target_direct, "asking") > asked);
    cluster.finish_migration(slot, *target);

    first += retry_until_done(step, id);
    CHECK(&cluster.owner_of(slot) == target);
    check_agreement(step, id, first);
  }
}
