// The fault proxy in front of every node of the cluster: the client learns only proxy
// addresses (CLUSTER SLOTS rewritten), and a fault on one node is proven on that node.
#include <catch2/catch.hpp>

#include <map>
#include <string>

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

std::int64_t script_calls_of(const RedisServer& node) {
  Redis direct(node.options());
  return script_calls(direct);
}

// A key of this test's own (by its hash tag) on each of `masters` masters.
std::map<RedisServer*, std::string> key_on_masters(const RedisCluster& cluster,
                                                   std::size_t masters) {
  const std::string prefix = unique_prefix();
  std::map<RedisServer*, std::string> key_on;
  for (int i = 0; key_on.size() < masters && i < 1000; ++i) {
    const std::string key = "{" + prefix + std::to_string(i) + "}:probe";
    key_on.emplace(&cluster.owner_of(detail::key_slot(key)), key);
  }
  REQUIRE(key_on.size() == masters);
  return key_on;
}

} // namespace

TEST_CASE("fault proxies in front of a cluster: calls reach every master through its proxy, "
          "and a reply lost on one node",
          "[cluster][proxy]") {
  RedisCluster& cluster = shared_cluster();
  ClusterFaultProxy proxies(cluster);
  RedisOptions options = proxies.options();
  options.command_timeout = 200ms;
  Redis redis(options);

  const std::map<RedisServer*, std::string> key_on = key_on_masters(cluster, 3);

  // each call is seen by the proxy of its node: the client took the proxies' ports from the
  // rewritten CLUSTER SLOTS and never went to the nodes themselves
  for (const auto& [node, key] : key_on) {
    FaultProxy& proxy = proxies.proxy_of(*node);
    proxy.add_rule({script_call_with_key_prefix(key), Fault::delay_reply, 1, 10ms});
    CHECK(redis.eval(probe, {key}, probe_args()).at(1).as_integer() == 1);
    CHECK(proxy.injected(Fault::delay_reply) == 1);
    CHECK(Redis(node->options()).command({"HGET", key, "f"}).as_string() == "1:10");
  }

  // a lost reply on one node: it ran there; the other nodes are untouched by it
  RedisServer* const lossy = key_on.begin()->first;
  const std::string lost_key = key_on.begin()->second;
  const std::int64_t before = script_calls_of(*lossy);
  proxies.proxy_of(*lossy).add_rule({script_call_with_key_prefix(lost_key), Fault::drop_reply});
  const Error e = error_of([&] { redis.eval(probe, {lost_key}, probe_args()); });
  CHECK(e.code() == errc::timeout);
  CHECK(e.outcome() == Outcome::unknown);
  Redis direct(lossy->options());
  CHECK(eventually([&] { return direct.command({"HGET", lost_key, "f"}).as_string() == "2:20"; }));
  CHECK(script_calls_of(*lossy) == before + 1);
  CHECK(proxies.proxy_of(*lossy).injected(Fault::drop_reply) == 1);
  for (const auto& [node, key] : key_on) {
    if (node != lossy) {
      CHECK(redis.eval(probe, {key}, probe_args()).at(1).as_integer() == 2);
    }
  }
}

TEST_CASE("fault proxies in front of a cluster: an ASK redirection leads to the target's proxy",
          "[cluster][proxy]") {
  RedisCluster& cluster = shared_cluster();
  ClusterFaultProxy proxies(cluster);
  Redis redis(proxies.options());
  const std::string key = "{" + unique_prefix() + "}:asked";
  const int slot = detail::key_slot(key);
  CHECK(redis.eval(probe, {key}, probe_args()).at(1).as_integer() == 1);

  // the slot half way to another master, its key already there: the source answers
  // "-ASK <slot> 127.0.0.1:<target port>", which the proxy turns into the target's proxy
  RedisServer& source = cluster.owner_of(slot);
  RedisServer* target = nullptr;
  for (RedisServer* node : cluster.nodes()) {
    if (node != &source && node->pid() > 0 &&
        Redis(node->options()).command({"ROLE"}).at(0).as_string() == "master") {
      target = node;
    }
  }
  REQUIRE(target != nullptr);
  FaultProxy& target_proxy = proxies.proxy_of(*target);
  target_proxy.add_rule({script_call_with_key_prefix(key), Fault::delay_reply, 1, 10ms});
  cluster.begin_migration(slot, source, *target);
  cluster.move_keys(slot, source, *target);
  const Reply reply = redis.eval(probe, {key}, probe_args());
  cluster.finish_migration(slot, *target);
  CHECK(reply.at(1).as_integer() == 2);
  CHECK(target_proxy.injected(Fault::delay_reply) == 1);
  CHECK(Redis(target->options()).command({"HGET", key, "f"}).as_string() == "2:20");
}

// A pipeline over two masters whose second cannot be reached once the first ran: the first's
// calls ran and keep their replies; only the unreachable master's calls are refused in place
// (they did not run). Throwing "not sent" for the whole pipeline would have a host decide again
// calls that Redis already counted.
TEST_CASE("a pipeline over two masters, one unreachable: the calls that ran keep their replies",
          "[cluster][proxy]") {
  RedisCluster& cluster = shared_cluster();
  ClusterFaultProxy proxies(cluster);
  RedisOptions options = proxies.options();
  options.command_timeout = 200ms;
  options.connect_timeout = 200ms;
  options.breaker_failures = 0;
  Redis redis(options);

  const std::map<RedisServer*, std::string> key_on = key_on_masters(cluster, 2);
  std::vector<ScriptCall> calls;
  for (const auto& [node, key] : key_on) {
    calls.push_back({&probe, {key}, probe_args()});
  }
  REQUIRE(redis.eval_pipeline(calls).size() == 2); // both nodes known, one write each

  // whichever master the pipeline reaches second refuses new connections (and has none left)
  RedisServer* first = nullptr;
  RedisServer* unreachable = nullptr;
  for (const auto& [node, key] : key_on) {
    (first == nullptr ? first : unreachable) = node;
  }
  FaultProxy& refusing = proxies.proxy_of(*unreachable);
  refusing.refuse_connections(true);
  refusing.cut_all();
  std::vector<Reply> replies;
  for (int round = 0; round < 2; ++round) {
    // the pipeline's order of nodes is the client's own: try both orders of the calls
    std::swap(calls[0], calls[1]);
    const std::int64_t before = script_calls_of(*unreachable);
    replies = redis.eval_pipeline(calls);
    REQUIRE(replies.size() == 2);
    CHECK(script_calls_of(*unreachable) == before);
    for (std::size_t i = 0; i < 2; ++i) {
      const bool on_unreachable = calls[i].keys.front() == key_on.at(unreachable);
      INFO("call " << i << (on_unreachable ? " (unreachable master)" : ""));
      CHECK(replies[i].is_error() == on_unreachable);
    }
  }
  refusing.refuse_connections(false);
  // the reachable master ran its call in each round; the unreachable one ran none of them
  CHECK(Redis(first->options()).command({"HGET", key_on.at(first), "f"}).as_string() == "3:30");
  CHECK(Redis(unreachable->options()).command({"HGET", key_on.at(unreachable), "f"}).as_string() ==
        "1:10");
}
