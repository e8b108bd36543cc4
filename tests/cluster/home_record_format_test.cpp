// Issue 14 item 1 on a Redis Cluster: the home record of a transaction (lua/transaction_home.lua)
// keeps its state, fingerprint, plan (the share tags) and denial, not every counter's totals.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include <limitcounter/limitcounter.hpp>

#include "support/probe.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"

using namespace limitcounter;
using testing::shared_cluster;

namespace {

// The bench's four shapes (bench/cluster.cpp): four counter slots, one rule each.
RuleSet four_shapes(std::int64_t card_limit) {
  RuleSet rules;
  for (const char* shape : {"merchant", "dept", "channel", "card"}) {
    rules.add(Rule(std::string(shape) + "_day")
                  .where(shape)
                  .per(Period::day)
                  .max_amount(std::string(shape) == "card" ? card_limit : 1'000'000'000));
  }
  return rules;
}

// At most 7 characters unique to this run, for ids and dimension values: the test prefix without
// its ':' (a separator, refused in a dimension value; with a 3-digit pid, a fresh machine's, the
// first 7 characters of "t692-8:" held one).
std::string run_tag() {
  std::string tag = testing::unique_prefix();
  tag.erase(std::remove(tag.begin(), tag.end(), ':'), tag.end());
  return tag.substr(0, 7);
}

} // namespace

// MEMORY USAGE ... SAMPLES 0 (redis-server 7.0, jemalloc: allocations in steps of 16 bytes) of
// the home records measured when they were made this small; the earlier format (the decision
// with every rule's status, the share record keys) took 360, 1,040, 1,336 and 1,040 bytes.
TEST_CASE("a home record keeps no counter's totals: 152-216 bytes with the default prefix and "
          "17-character ids",
          "[cluster][limits][home]") {
  Redis redis(shared_cluster().options());
  LimitCounter limits(redis, Calendar("UTC")); // the default prefix, trans:limit:
  // 17 characters, unique to this run (the record's size does not depend on the counters)
  const std::string run = run_tag();
  const auto id = [&](const std::string& name) {
    std::string text = "pay-" + run + "-" + name;
    text.resize(17, '0');
    return text;
  };
  const auto home_bytes = [&](const std::string& transaction_id) {
    const std::string home = limits.keys().transaction(transaction_id);
    REQUIRE(redis.command({"TYPE", home}).as_string() == "hash");
    return redis.command({"MEMORY", "USAGE", home, "SAMPLES", "0"}).to_int64();
  };
  const auto payment = [&](const std::string& transaction_id) {
    return Transaction{
        transaction_id,
        {{"merchant", "m" + run}, {"dept", "cmb"}, {"channel", "Ali"}, {"card", "c" + run}},
        100};
  };
  std::int64_t bytes = 0;
  std::int64_t bound = 0;
  SECTION("consumed, 1 rule") {
    limits.set_rules(
        RuleSet().add(Rule("merchant_day").where("merchant").per(Period::day).max_amount(1000)));
    REQUIRE(limits.consume(payment(id("c1"))).allowed());
    bytes = home_bytes(id("c1"));
    bound = 152;
  }
  SECTION("consumed, 4 rules of 4 shapes") {
    limits.set_rules(four_shapes(1'000'000'000));
    REQUIRE(limits.consume(payment(id("c4"))).allowed());
    bytes = home_bytes(id("c4"));
    bound = 168;
  }
  SECTION("denied, 4 rules") {
    limits.set_rules(four_shapes(50));
    const Decision denied = limits.consume(payment(id("d4")));
    REQUIRE_FALSE(denied.allowed());
    REQUIRE(denied.denial);
    bytes = home_bytes(id("d4"));
    bound = 216;
  }
  SECTION("reserved, 4 rules") {
    limits.set_rules(four_shapes(1'000'000'000));
    REQUIRE(limits.reserve(payment(id("r4"))).allowed());
    bytes = home_bytes(id("r4"));
    bound = 184;
  }
  CHECK(bytes <= bound);
}

TEST_CASE("a home record of the earlier format is not decided again", "[cluster][limits][home]") {
  Redis redis(shared_cluster().options());
  LimitCounterOptions options;
  options.key_prefix = testing::unique_prefix() + "home:";
  LimitCounter limits(redis, Calendar("UTC"), options);
  limits.set_rules(
      RuleSet().add(Rule("merchant_day").where("merchant").per(Period::day).max_amount(1000)));
  // as the earlier format wrote a consumed transaction (its shares' counters long moved)
  const std::string home = limits.keys().transaction("old-1");
  redis.command({"HSET", home, "fp", "0123456789abcdef:100", "plan",
                 options.key_prefix + "{merchant}:tx:old-1", "state", "consumed", "decision",
                 "allowed\n-", "amount", "100", "refunded", "0"});
  const Transaction retry{"old-1", {{"merchant", "m1"}}, 100};
  CHECK(testing::error_of([&] { limits.consume(retry); }).code() == errc::conflict);
  CHECK(limits.usage("merchant", Dimension{"m1"}, Period::day) == Usage{0, 0});
  CHECK(redis.command({"HGET", home, "state"}).as_string() == "consumed"); // untouched
  CHECK(redis.command({"HLEN", home}).as_integer() == 6);
  CHECK(limits.finish_interrupted(std::chrono::seconds{0}).empty());
}

// What a transaction keeps on a cluster in all: its home record and one share record per
// counter slot (the plan's tags), each a key of its own. The figures docs/BENCHMARKS.md gives
// ("Redis Cluster", item 1 of issue 14), measured with the 17-character ids of the test above.
TEST_CASE("a cluster transaction's records in all: the home record and one share record per "
          "counter slot",
          "[cluster][limits][home]") {
  Redis redis(shared_cluster().options());
  LimitCounter limits(redis, Calendar("UTC"));
  const std::string run = run_tag();
  // The home record first, then the share records of its plan (transaction_record reads them).
  const auto records_bytes = [&](const std::string& transaction_id, std::size_t shares) {
    const std::optional<TransactionRecord> record = limits.transaction_record(transaction_id);
    REQUIRE(record);
    CHECK(record->records.size() == 1 + shares);
    std::int64_t bytes = 0;
    for (std::size_t i = 0; i < record->records.size(); ++i) {
      const std::string& key = record->records[i];
      REQUIRE(redis.command({"TYPE", key}).as_string() == (i == 0 ? "hash" : "string"));
      bytes += redis.command({"MEMORY", "USAGE", key, "SAMPLES", "0"}).to_int64();
    }
    return bytes;
  };
  const auto payment = [&](const std::string& name) {
    std::string id = "pay-" + run + "-" + name;
    id.resize(17, '0');
    return Transaction{
        id,
        {{"merchant", "m" + run}, {"dept", "cmb"}, {"channel", "Ali"}, {"card", "c" + run}},
        100};
  };
  SECTION("1 rule: one share, 304 bytes") {
    limits.set_rules(
        RuleSet().add(Rule("merchant_day").where("merchant").per(Period::day).max_amount(1000)));
    const Transaction one = payment("t1");
    REQUIRE(limits.consume(one).allowed());
    CHECK(records_bytes(one.id, 1) <= 304);
  }
  SECTION("4 rules of 4 shapes: four shares, 776 bytes") {
    limits.set_rules(four_shapes(1'000'000'000));
    const Transaction four = payment("t4");
    REQUIRE(limits.consume(four).allowed());
    CHECK(records_bytes(four.id, 4) <= 776);
  }
}
