// One circuit breaker per node: a stalled master opens its own breaker only. Calls that need
// it fail fast; calls to the other masters still reach them (proven by INFO commandstats on
// each node), and the slot map is read from another node than the stalled one.
#include <catch2/catch.hpp>

#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <limitcounter/limitcounter.hpp>

#include "redis/key_slot.hpp"
#include "support/fault_proxy.hpp"
#include "support/probe.hpp"
#include "support/redis_cluster.hpp"

using namespace std::chrono_literals;
using namespace limitcounter;
using namespace limitcounter::testing;

namespace {

long long script_calls_of(const RedisServer& node) {
  Redis direct(node.options());
  return script_calls(direct);
}

std::string field_of(const RedisServer& node, const std::string& key) {
  return Redis(node.options()).command({"HGET", key, "f"}).as_string();
}

// Through the proxies, with a short timeout and a breaker that opens after 3 failures and
// stays open for the test.
RedisOptions breaker_options(const ClusterFaultProxy& proxies) {
  RedisOptions options = proxies.options();
  options.command_timeout = 300ms; // (a healthy call on a loaded machine stays well within it)
  options.breaker_failures = 3;
  options.breaker_pause = 60s; // no probe during the test
  return options;
}

// Stalls the master `proxy` stands for: it takes `redis`'s calls on `key` and never answers,
// until its breaker opens; from then on it does not even answer for its slot map.
void stall_until_breaker_opens(Redis& redis, FaultProxy& proxy, const std::string& key) {
  const int failures = redis.options().breaker_failures;
  proxy.add_rule({script_call_with_key_prefix(key), Fault::blackhole, failures});
  for (int i = 0; i < failures; ++i) {
    const Error e = error_of([&] { redis.eval(probe, {key}, probe_args()); });
    CHECK(e.code() == errc::timeout);
  }
  CHECK(proxy.injected(Fault::blackhole) == static_cast<std::size_t>(failures));
  proxy.add_rule({command_named("CLUSTER"), Fault::blackhole, 1000});
}

} // namespace

TEST_CASE("a stalled master opens its own breaker: its calls fail fast, the other masters go on",
          "[cluster][proxy][breaker]") {
  RedisCluster& cluster = shared_cluster();
  ClusterFaultProxy proxies(cluster);
  const RedisOptions options = breaker_options(proxies);
  Redis redis(options);

  // The stalled master is the first seed, the first node asked for the slot map.
  const std::vector<RedisServer*> nodes = cluster.nodes();
  RedisServer& stalled = *nodes.front();
  REQUIRE(options.cluster_seeds.front() ==
          "127.0.0.1:" + std::to_string(proxies.proxy_of(stalled).port()));

  // a key (by its hash tag) on each master
  const std::string prefix = unique_prefix();
  std::map<RedisServer*, std::string> key_on;
  for (int i = 0; key_on.size() < nodes.size() && i < 1000; ++i) {
    const std::string key = "{" + prefix + std::to_string(i) + "}:probe";
    key_on.emplace(&cluster.owner_of(detail::key_slot(key)), key);
  }
  REQUIRE(key_on.size() == 3);
  REQUIRE(key_on.count(&stalled) == 1);
  const std::string stalled_key = key_on.at(&stalled);
  std::vector<RedisServer*> healthy;
  for (RedisServer* node : nodes) {
    if (node != &stalled) {
      healthy.push_back(node);
    }
  }
  REQUIRE(healthy.size() == 2);
  for (const auto& [node, key] : key_on) {
    REQUIRE(redis.eval(probe, {key}, probe_args()).at(1).as_integer() == 1);
  }

  // The stalled master takes its calls and never answers: breaker_failures timeouts.
  FaultProxy& stalled_proxy = proxies.proxy_of(stalled);
  const long long stalled_before = script_calls_of(stalled);
  stall_until_breaker_opens(redis, stalled_proxy, stalled_key);

  // Its calls fail fast, not sent: the blackhole rule is spent, so a call that went out would
  // have run there.
  const Error open = error_of([&] { redis.eval(probe, {stalled_key}, probe_args()); });
  CHECK(open.code() == errc::circuit_open);
  CHECK(open.outcome() == Outcome::not_sent);
  CHECK(script_calls_of(stalled) == stalled_before);
  CHECK(field_of(stalled, stalled_key) == "1:10");

  // Calls to keys of the other masters still reach them, one script call each.
  for (RedisServer* node : healthy) {
    const std::string& key = key_on.at(node);
    const long long before = script_calls_of(*node);
    CHECK(redis.eval(probe, {key}, probe_args()).at(1).as_integer() == 2);
    CHECK(script_calls_of(*node) == before + 1);
    CHECK(redis.command({"HGET", key, "f"}).as_string() == "2:20");
  }

  // A pipeline over the healthy masters runs; one that also needs the stalled master is not
  // sent anywhere (the whole batch fails fast, as when a connection cannot be made).
  std::vector<ScriptCall> healthy_calls;
  for (RedisServer* node : healthy) {
    healthy_calls.push_back({&probe, {key_on.at(node)}, probe_args()});
  }
  const std::vector<Reply> replies = redis.eval_pipeline(healthy_calls);
  REQUIRE(replies.size() == 2);
  CHECK(replies[0].at(1).as_integer() == 3);
  CHECK(replies[1].at(1).as_integer() == 3);
  std::vector<ScriptCall> mixed = healthy_calls;
  mixed.push_back({&probe, {stalled_key}, probe_args()});
  std::map<RedisServer*, long long> before_mixed;
  for (RedisServer* node : healthy) {
    before_mixed[node] = script_calls_of(*node);
  }
  const Error mixed_error = error_of([&] { redis.eval_pipeline(mixed); });
  CHECK(mixed_error.code() == errc::circuit_open);
  CHECK(mixed_error.outcome() == Outcome::not_sent);
  for (RedisServer* node : healthy) {
    CHECK(script_calls_of(*node) == before_mixed[node]);
    CHECK(field_of(*node, key_on.at(node)) == "3:30");
  }
  // Asked for the refusals, the same pipeline refuses the stalled master's call alone (not
  // sent) and runs the healthy masters' calls.
  std::vector<std::optional<Error>> refusals;
  const std::vector<Reply> partly = redis.eval_pipeline(mixed, refusals);
  REQUIRE(partly.size() == 3);
  REQUIRE(refusals.size() == 3);
  CHECK_FALSE(refusals[0]);
  CHECK_FALSE(refusals[1]);
  REQUIRE(refusals[2]);
  CHECK(refusals[2]->code() == errc::circuit_open);
  CHECK(refusals[2]->outcome() == Outcome::not_sent);
  CHECK(partly[2].is_error());
  CHECK(partly[0].at(1).as_integer() == 4);
  CHECK(partly[1].at(1).as_integer() == 4);
  for (RedisServer* node : healthy) {
    CHECK(script_calls_of(*node) == before_mixed[node] + 1);
    CHECK(field_of(*node, key_on.at(node)) == "4:40");
  }
  CHECK(script_calls_of(stalled) == stalled_before);

  // A slot moves between the healthy masters: the MOVED makes the client read the slot map
  // again, from another seed than the stalled first one, and the call lands on the new owner.
  RedisServer& from = *healthy[0];
  RedisServer& to = *healthy[1];
  const std::string moved_key = key_on.at(&from);
  cluster.migrate_slot(detail::key_slot(moved_key), to);
  const long long to_before = script_calls_of(to);
  CHECK(redis.eval(probe, {moved_key}, probe_args()).at(1).as_integer() == 5);
  CHECK(script_calls_of(to) == to_before + 1);
  CHECK(field_of(to, moved_key) == "5:50");
  CHECK(stalled_proxy.injected(Fault::blackhole) ==
        static_cast<std::size_t>(options.breaker_failures)); // the stalled node was not asked
}

// consume_many sends each step of all its transactions in one pipeline: a master behind an
// open breaker refuses only its own calls. The transactions whose home record lives there fall
// to their failure policy (not sent), as a lone consume would; the others are decided by Redis.
TEST_CASE("consume_many with one master's breaker open: its transactions fall to their "
          "failure policy, the others are decided by Redis",
          "[cluster][proxy][breaker][batch]") {
  RedisCluster& cluster = shared_cluster();
  ClusterFaultProxy proxies(cluster);
  const RedisOptions options = breaker_options(proxies);
  Redis redis(options);
  Redis direct(cluster.options());
  LimitCounterOptions limit_options;
  limit_options.key_prefix = unique_prefix() + "brk:";
  LimitCounter limits(redis, Calendar("UTC"), limit_options);
  LimitCounter reader(direct, Calendar("UTC"), limit_options);
  limits.set_rules(RuleSet().add(Rule("merchant-day")
                                     .where("merchant")
                                     .per(Period::day)
                                     .max_count(1000)
                                     .on_redis_failure(FailurePolicy::allow)));

  // The stalled master holds home records only (not the merchant counters).
  RedisServer* stalled = nullptr;
  for (RedisServer* node : cluster.nodes()) {
    if (node != &cluster.owner_of(detail::key_slot("{merchant}"))) {
      stalled = node;
    }
  }
  REQUIRE(stalled != nullptr);
  std::string stalled_key;
  for (int i = 0; stalled_key.empty(); ++i) {
    const std::string key = "{" + limit_options.key_prefix + std::to_string(i) + "}:probe";
    if (&cluster.owner_of(detail::key_slot(key)) == stalled) {
      stalled_key = key;
    }
  }
  stall_until_breaker_opens(redis, proxies.proxy_of(*stalled), stalled_key);

  // A batch with home records on the stalled master and on the others.
  std::vector<Transaction> batch;
  std::vector<bool> home_stalled;
  int on_stalled = 0;
  for (int i = 0; on_stalled < 3 || static_cast<int>(batch.size()) - on_stalled < 3; ++i) {
    const std::string id = "brk-" + std::to_string(i);
    batch.push_back(Transaction{id, {{"merchant", "m1"}}, 10});
    home_stalled.push_back(&cluster.owner_of(detail::key_slot(limits.keys().transaction(id))) ==
                           stalled);
    on_stalled += home_stalled.back() ? 1 : 0;
  }
  const long long stalled_before = script_calls_of(*stalled);
  const auto results = limits.consume_many(batch);
  REQUIRE(results.size() == batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    INFO("transaction " << batch[i].id << (home_stalled[i] ? " (home on the stalled master)" : ""));
    const auto* decision = std::get_if<Decision>(&results[i]);
    REQUIRE(decision);
    CHECK(decision->allowed());
    CHECK(decision->degraded == home_stalled[i]);
  }
  // Redis counted the others, each once; nothing reached the stalled master.
  CHECK(reader.usage("merchant", Dimension{"m1"}, Period::day).count ==
        static_cast<std::int64_t>(batch.size()) - on_stalled);
  CHECK(script_calls_of(*stalled) == stalled_before);
}
