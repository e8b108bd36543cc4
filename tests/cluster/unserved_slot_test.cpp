// A cluster that serves some slots but not all (`cluster-require-full-coverage no`, slots no
// master has): a transaction whose home record's slot no node serves is refused before anything
// is sent; the other transactions of its batch are decided (proven by the counters).
#include <catch2/catch.hpp>

#include <string>
#include <variant>
#include <vector>

#include <limitcounter/limitcounter.hpp>

#include "redis/key_slot.hpp"
#include "support/probe.hpp"
#include "support/redis_cluster.hpp"

using namespace limitcounter;
using namespace limitcounter::testing;

namespace {

// Takes `slot` from the cluster: its owner gives it up first (else its gossip could give it
// back to a node that forgot it), then every other node forgets it; until no node lists it.
void unassign(const RedisCluster& cluster, int slot) {
  RedisServer& owner = cluster.owner_of(slot);
  std::vector<RedisServer*> nodes{&owner};
  for (RedisServer* node : cluster.nodes()) {
    if (node != &owner) {
      nodes.push_back(node);
    }
  }
  for (RedisServer* node : nodes) {
    Redis direct(node->options());
    REQUIRE(direct.command({"CONFIG", "SET", "cluster-require-full-coverage", "no"}).as_string() ==
            "OK");
    REQUIRE(direct.command({"CLUSTER", "DELSLOTS", std::to_string(slot)}).as_string() == "OK");
  }
  REQUIRE(eventually([&] {
    for (RedisServer* node : nodes) {
      const Reply ranges = Redis(node->options()).command({"CLUSTER", "SLOTS"});
      for (const Reply& range : ranges.as_array()) {
        if (range.at(0).as_integer() <= slot && slot <= range.at(1).as_integer()) {
          return false;
        }
      }
    }
    return true;
  }));
}

// How many times the cluster's nodes were asked for the slot map.
long long slot_map_reads(const RedisCluster& cluster) {
  long long reads = 0;
  for (RedisServer* node : cluster.nodes()) {
    Redis direct(node->options());
    reads += command_calls(direct, "cluster|slots");
  }
  return reads;
}

} // namespace

TEST_CASE("consume_many: a home record in a slot no node serves refuses its transaction alone",
          "[cluster][limits]") {
  RedisCluster cluster(3); // its own: slots are taken from it
  LimitCounterOptions options;
  options.key_prefix = unique_prefix() + "unserved:";
  const CounterKeys keys(options.key_prefix);
  const std::vector<std::string> gone_ids{"gone-1", "gone-2"};
  std::vector<int> gone;
  for (const std::string& id : gone_ids) {
    gone.push_back(detail::key_slot(keys.transaction(id)));
    unassign(cluster, gone.back());
  }
  for (const char* id : {"ok-0", "ok-1", "ok-2"}) {
    const int slot = detail::key_slot(keys.transaction(id));
    REQUIRE((slot != gone[0] && slot != gone[1]));
  }
  Redis redis(cluster.options()); // (its first slot map lacks them)
  LimitCounter limits(redis, Calendar("UTC"), options);
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_count(100)));
  const auto payment = [](const std::string& id) {
    return Transaction{id, {{"merchant", "m1"}}, 10};
  };

  REQUIRE(limits.consume(payment("ok-0")).allowed()); // (the client has read the map)

  const long long reads_before = slot_map_reads(cluster);
  const std::vector<BatchResult<Decision>> results = limits.consume_many(
      {payment("ok-1"), payment(gone_ids[0]), payment("ok-2"), payment(gone_ids[1])});
  // The begins' pipeline read the map once for both unserved slots, not once each.
  CHECK(slot_map_reads(cluster) - reads_before == 1);
  REQUIRE(results.size() == 4);
  for (const std::size_t i : {1, 3}) {
    REQUIRE(std::holds_alternative<Error>(results[i]));
    const Error& refused = std::get<Error>(results[i]);
    CHECK(refused.code() == errc::cluster_down);
    CHECK(refused.outcome() == Outcome::not_sent);
    CHECK(std::string(refused.what()).find(std::to_string(gone[i / 2])) != std::string::npos);
  }
  for (const std::size_t i : {0, 2}) {
    REQUIRE(std::holds_alternative<Decision>(results[i]));
    CHECK(std::get<Decision>(results[i]).allowed());
  }
  CHECK(limits.usage("merchant", Dimension{"m1"}, Period::day).count == 3);
}
