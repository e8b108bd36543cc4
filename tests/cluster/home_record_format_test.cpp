// The home record of a transaction on a Redis Cluster (lua/transaction_home.lua): a string in the
// format of every transaction record (lua/shared/record.lua), keeping its state, fingerprint,
// plan (the share tags) and denial, not every counter's totals.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <limitcounter/detail/lua_scripts.hpp>
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
TEST_CASE("a home record keeps no counter's totals: 152-200 bytes with the default prefix and "
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
    REQUIRE(redis.command({"TYPE", home}).as_string() == "string");
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
    bound = 200;
  }
  SECTION("reserved, 4 rules") {
    limits.set_rules(four_shapes(1'000'000'000));
    REQUIRE(limits.reserve(payment(id("r4"))).allowed());
    bytes = home_bytes(id("r4"));
    bound = 184;
  }
  CHECK(bytes <= bound);
}

// The words of a home record at each step (lua/shared/record.lua): the format every transaction
// record has, with no counters ('-') and the home's words, and what inspect reads of it.
TEST_CASE("a home record is a transaction record of the one format, with the home's words",
          "[cluster][limits][home]") {
  Redis redis(shared_cluster().options());
  const std::string prefix = testing::unique_prefix() + "home:";
  const std::string reserved = prefix + "tx:{words-r}";
  const std::string denied = prefix + "tx:{words-d}";
  const auto run = [&](const std::string& home, const std::vector<std::string>& args) {
    return redis.eval(scripts::transaction_home, {home}, args);
  };
  const auto text = [&](const std::string& home) {
    return redis.command({"GET", home}).as_string();
  };
  const auto field = [&](const std::string& home, const std::string& name) {
    return testing::record_field(redis, home, name);
  };
  const auto base36 = [](std::int64_t n) {
    std::string digits;
    do {
      digits.insert(digits.begin(), "0123456789abcdefghijklmnopqrstuvwxyz"[n % 36]);
      n /= 36;
    } while (n > 0);
    return digits;
  };
  const std::int64_t hold = std::chrono::duration_cast<std::chrono::milliseconds>(
                                (Clock::now() + std::chrono::hours{1}).time_since_epoch())
                                .count();
  const std::string lifetime = "86400000"; // (ms: a home record begun lives a day)
  const std::string plan = "dept\nmerchant";

  REQUIRE(run(reserved, {"begin", "0123456789a:100", plan, lifetime, std::to_string(hold)})
              .at(0)
              .as_string() == "go");
  CHECK_THAT(text(reserved), Catch::Matches("p 0123456789a 100 - " + base36(hold) +
                                            R"( P:\{dept\}\{merchant\} B:[0-9a-z]+)"));
  CHECK(field(reserved, "state") == "pending");
  CHECK(field(reserved, "hexp") == std::to_string(hold));
  CHECK(field(reserved, "plan") == plan);
  CHECK_FALSE(field(reserved, "begun").empty());
  // kept the lifetime begin gave, from now by the server's clock (whatever the client's)
  const std::int64_t ttl = redis.command({"PTTL", reserved}).to_int64();
  CHECK(ttl > 86'400'000 - 60'000);
  CHECK(ttl <= 86'400'000);

  REQUIRE(run(reserved, {"finish", "0123456789a:100", "reserved", "", std::to_string(hold), "0"})
              .at(0)
              .as_string() == "first");
  CHECK(text(reserved) == "r 0123456789a 100 - " + base36(hold) + " P:{dept}{merchant}");

  REQUIRE(run(reserved, {"confirm", "60", "0"}).at(0).as_string() == "confirmed");
  CHECK_THAT(text(reserved),
             Catch::Matches(R"(f 0123456789a 60 - \^100 P:\{dept\}\{merchant\} O:[0-9a-z]+)"));
  CHECK(field(reserved, "amount") == "60");
  CHECK(field(reserved, "hexp").empty()); // (a reservation's only)
  // its reserve's fingerprint still names it: the amount it began with
  CHECK(run(reserved, {"begin", "0123456789a:100", plan, lifetime}).at(1).as_string() ==
        "confirmed");
  CHECK(run(reserved, {"begin", "0123456789a:60", plan, lifetime}).at(0).as_string() == "conflict");

  REQUIRE(run(reserved, {"refund", "10", "first"}).at(0).as_string() == "refunded");
  const Reply full = run(reserved, {"refund", "-1", ""});
  CHECK(full.at(1).as_string() == "50"); // all that was left of 60
  CHECK_THAT(text(reserved), Catch::Matches(R"(f 0123456789a 60 - \^100 G:first:10 \* )"
                                            R"(P:\{dept\}\{merchant\} O:[0-9a-z]+)"));
  CHECK(field(reserved, "refunded") == "60");
  CHECK(field(reserved, "r:first") == "10:10");
  CHECK(field(reserved, "rf") == "-1:50");

  // the sweep follows the open change (the full refund last), then closes it (each change is
  // dated a ms past the one before: the three above may run ahead of the clock)
  std::this_thread::sleep_for(std::chrono::milliseconds{20});
  const Reply taken = run(reserved, {"sweep", "0"});
  REQUIRE(taken.at(0).as_string() == "follow");
  CHECK(taken.at(1).as_string() == "confirmed");
  CHECK(taken.at(2).as_string() == plan);
  CHECK(taken.at(4).as_string() == "60");
  REQUIRE(taken.as_array().size() == 10);
  CHECK(taken.at(5).as_string() == "0123456789a:100"); // as it began: what its voids name
  CHECK(taken.at(6).as_string() == "10");
  CHECK(taken.at(7).as_string() == "first");
  CHECK(taken.at(8).as_string() == "-1");
  CHECK(taken.at(9).as_string() == "");
  CHECK(run(reserved, {"swept", taken.at(3).as_string()}).at(0).as_string() == "closed");
  CHECK(field(reserved, "open") == "-" + taken.at(3).as_string());
  CHECK(run(reserved, {"sweep", "0"}).at(0).as_string() == "none");

  // a consume's begin has no hold; a denial keeps its rule, metric, limit and used
  REQUIRE(run(denied, {"begin", "0123456789b:100", "dept", lifetime}).at(0).as_string() == "go");
  CHECK_THAT(text(denied), Catch::Matches(R"(p 0123456789b 100 - - P:\{dept\} B:[0-9a-z]+)"));
  REQUIRE(run(denied, {"finish", "0123456789b:100", "denied", "dept_day amount 1000 950", "", "0"})
              .at(0)
              .as_string() == "first");
  CHECK_THAT(text(denied),
             Catch::Matches(R"(d 0123456789b 100 dept_day a 1000 950 P:\{dept\} O:[0-9a-z]+)"));
  CHECK(field(denied, "denial") == "dept_day amount 1000 950");
  const Reply replay = run(denied, {"begin", "0123456789b:100", "dept", lifetime});
  CHECK(replay.at(1).as_string() == "denied");
  CHECK(replay.at(2).as_string() == "dept_day amount 1000 950");
}

// The home records of unreleased versions were hashes: the first with named fields, then with
// one-letter ones. A retry of such an id is refused, never decided again; the sweep skips them.
TEST_CASE("a home record of an earlier format (a hash) is not decided again",
          "[cluster][limits][home]") {
  Redis redis(shared_cluster().options());
  LimitCounterOptions options;
  options.key_prefix = testing::unique_prefix() + "home:";
  LimitCounter limits(redis, Calendar("UTC"), options);
  limits.set_rules(
      RuleSet().add(Rule("merchant_day").where("merchant").per(Period::day).max_amount(1000)));
  // as the earlier formats wrote a consumed transaction (its shares' counters long moved)
  const std::vector<std::pair<std::string, std::vector<std::string>>> formats{
      {"named",
       {"fp", "0123456789abcdef:100", "plan", options.key_prefix + "{merchant}:tx:named", "state",
        "consumed", "decision", "allowed\n-", "amount", "100", "refunded", "0"}},
      {"letters", {"f", "0123456789a:100", "p", "merchant", "s", "c"}}};
  for (const auto& format : formats) {
    const std::string& id = format.first;
    const std::vector<std::string>& fields = format.second;
    INFO(id);
    const std::string home = limits.keys().transaction(id);
    std::vector<std::string> hset{"HSET", home};
    hset.insert(hset.end(), fields.begin(), fields.end());
    redis.command(hset);
    const Transaction retry{id, {{"merchant", "m1"}}, 100};
    CHECK(testing::error_of([&] { limits.consume(retry); }).code() == errc::conflict);
    testing::error_of([&] { limits.refund(id, 10, "r1"); }); // (fails the test unless it throws)
    CHECK(limits.usage("merchant", Dimension{"m1"}, Period::day) == Usage{0, 0});
    CHECK(redis.command({"HGETALL", home}).as_array().size() == fields.size()); // untouched
  }
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
      REQUIRE(redis.command({"TYPE", key}).as_string() == "string");
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
