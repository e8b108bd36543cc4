// One circuit breaker per node: a stalled master opens its own breaker only. Calls that need
// it fail fast; calls to the other masters still reach them (proven by INFO commandstats on
// each node), and the slot map is read from another node than the stalled one.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include <limitcounter/error.hpp>
#include <limitcounter/redis.hpp>

#include "redis/key_slot.hpp"
#include "support/fault_proxy.hpp"
#include "support/probe.hpp"
#include "support/redis_cluster.hpp"

using namespace std::chrono_literals;
using namespace limitcounter;
using namespace limitcounter::testing;

namespace {

long long evalsha_calls(const RedisServer& node) {
  Redis direct(node.options());
  return command_calls(direct, "evalsha");
}

std::string field_of(const RedisServer& node, const std::string& key) {
  return Redis(node.options()).command({"HGET", key, "f"}).as_string();
}

} // namespace

TEST_CASE("a stalled master opens its own breaker: its calls fail fast, the other masters go on",
          "[cluster][proxy][breaker]") {
  RedisCluster& cluster = shared_cluster();
  ClusterFaultProxy proxies(cluster);
  RedisOptions options = proxies.options();
  options.command_timeout = 100ms;
  options.breaker_failures = 3;
  options.breaker_pause = 60s; // no probe during the test
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
  const long long stalled_before = evalsha_calls(stalled);
  stalled_proxy.add_rule(
      {evalsha_with_key_prefix(stalled_key), Fault::blackhole, options.breaker_failures});
  for (int i = 0; i < options.breaker_failures; ++i) {
    const Error e = error_of([&] { redis.eval(probe, {stalled_key}, probe_args()); });
    CHECK(e.code() == errc::timeout);
  }
  CHECK(stalled_proxy.injected(Fault::blackhole) ==
        static_cast<std::size_t>(options.breaker_failures));
  // From now on it does not even answer for its slot map.
  stalled_proxy.add_rule({command_named("CLUSTER"), Fault::blackhole, 1000});

  // Its calls fail fast, not sent: the blackhole rule is spent, so a call that went out would
  // have run there.
  const Error open = error_of([&] { redis.eval(probe, {stalled_key}, probe_args()); });
  CHECK(open.code() == errc::circuit_open);
  CHECK(open.outcome() == Outcome::not_sent);
  CHECK(evalsha_calls(stalled) == stalled_before);
  CHECK(field_of(stalled, stalled_key) == "1:10");

  // Calls to keys of the other masters still reach them, one EVALSHA each.
  for (RedisServer* node : healthy) {
    const std::string& key = key_on.at(node);
    const long long before = evalsha_calls(*node);
    CHECK(redis.eval(probe, {key}, probe_args()).at(1).as_integer() == 2);
    CHECK(evalsha_calls(*node) == before + 1);
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
    before_mixed[node] = evalsha_calls(*node);
  }
  const Error mixed_error = error_of([&] { redis.eval_pipeline(mixed); });
  CHECK(mixed_error.code() == errc::circuit_open);
  CHECK(mixed_error.outcome() == Outcome::not_sent);
  for (RedisServer* node : healthy) {
    CHECK(evalsha_calls(*node) == before_mixed[node]);
    CHECK(field_of(*node, key_on.at(node)) == "3:30");
  }

  // A slot moves between the healthy masters: the MOVED makes the client read the slot map
  // again, from another seed than the stalled first one, and the call lands on the new owner.
  RedisServer& from = *healthy[0];
  RedisServer& to = *healthy[1];
  const std::string moved_key = key_on.at(&from);
  cluster.migrate_slot(detail::key_slot(moved_key), to);
  const long long to_before = evalsha_calls(to);
  CHECK(redis.eval(probe, {moved_key}, probe_args()).at(1).as_integer() == 4);
  CHECK(evalsha_calls(to) == to_before + 1);
  CHECK(field_of(to, moved_key) == "4:40");
  CHECK(stalled_proxy.injected(Fault::blackhole) ==
        static_cast<std::size_t>(options.breaker_failures)); // the stalled node was not asked
}
