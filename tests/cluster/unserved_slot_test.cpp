// A cluster that serves some slots but not all (`cluster-require-full-coverage no`, a slot no
// master has): a transaction whose home record's slot no node serves is refused before anything
// is sent; the other transactions of its batch are decided (proven by the counters).
#include <catch2/catch.hpp>

#include <string>
#include <variant>
#include <vector>

#include <limitcounter/limitcounter.hpp>

#include "redis/key_slot.hpp"
#include "support/redis_cluster.hpp"

using namespace limitcounter;
using namespace limitcounter::testing;

TEST_CASE("consume_many: a home record in a slot no node serves refuses its transaction alone",
          "[cluster][limits]") {
  RedisCluster cluster(3); // its own: a slot is taken from it
  LimitCounterOptions options;
  options.key_prefix = unique_prefix() + "unserved:";
  const std::string gone_id = "gone-1";
  const int gone = detail::key_slot(CounterKeys(options.key_prefix).transaction(gone_id));
  for (RedisServer* node : cluster.nodes()) {
    Redis direct(node->options());
    REQUIRE(direct.command({"CONFIG", "SET", "cluster-require-full-coverage", "no"}).as_string() ==
            "OK");
    REQUIRE(direct.command({"CLUSTER", "DELSLOTS", std::to_string(gone)}).as_string() == "OK");
  }
  Redis redis(cluster.options()); // (its first slot map lacks `gone`)
  LimitCounter limits(redis, Calendar("UTC"), options);
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_count(100)));
  const auto payment = [](const std::string& id) {
    return Transaction{id, {{"merchant", "m1"}}, 10};
  };
  REQUIRE(detail::key_slot(limits.keys().transaction("ok-1")) != gone);
  REQUIRE(detail::key_slot(limits.keys().transaction("ok-2")) != gone);

  const std::vector<BatchResult<Decision>> results =
      limits.consume_many({payment("ok-1"), payment(gone_id), payment("ok-2")});
  REQUIRE(results.size() == 3);
  REQUIRE(std::holds_alternative<Error>(results[1]));
  CHECK(std::get<Error>(results[1]).code() == errc::cluster_down);
  CHECK(std::get<Error>(results[1]).outcome() == Outcome::not_sent);
  CHECK(std::string(std::get<Error>(results[1]).what()).find(std::to_string(gone)) !=
        std::string::npos);
  for (const std::size_t i : {0, 2}) {
    REQUIRE(std::holds_alternative<Decision>(results[i]));
    CHECK(std::get<Decision>(results[i]).allowed());
  }
  CHECK(limits.usage("merchant", Dimension{"m1"}, Period::day).count == 2);
}
