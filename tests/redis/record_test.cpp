// The transaction record of limits (issue 14 item 1): one small string per transaction, kept
// for the replay horizon whatever the windows; replays without stored totals; reversals with
// the host's original transaction after the record is gone; batches decided per transaction.
#include <algorithm>

#include <catch2/catch.hpp>

#include <limitcounter/limit_counter.hpp>

#include "support/probe.hpp"
#include "support/redis_server.hpp"
#include "support/topology.hpp"

using namespace std::chrono_literals;
using limitcounter::BatchResult;
using limitcounter::CancelResult;
using limitcounter::Clock;
using limitcounter::Decision;
using limitcounter::Dimension;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::LimitCounter;
using limitcounter::Metric;
using limitcounter::Period;
using limitcounter::Redis;
using limitcounter::Rule;
using limitcounter::RuleSet;
using limitcounter::Transaction;
using limitcounter::Usage;
using limitcounter::testing::command_calls;
using limitcounter::testing::error_of;
using limitcounter::testing::keys_matching;
using limitcounter::testing::test_options;
using limitcounter::testing::unique_prefix;

namespace {

struct RecordFixture {
  Redis redis{test_options()};
  std::string prefix = unique_prefix() + "rec:";
  LimitCounter limits{redis, limitcounter::Calendar("Asia/Shanghai"), options()};

  limitcounter::LimitCounterOptions options() const {
    limitcounter::LimitCounterOptions o;
    o.key_prefix = prefix;
    return o;
  }
  // 4 rules over 4 shapes, with month and year windows: the record must not live that long.
  static RuleSet four_rules() {
    return RuleSet()
        .add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(1000))
        .add(Rule("dept-month").where("dept").per(Period::month).max_count(1000))
        .add(Rule("channel-year").where("channel").per(Period::year).max_amount(1'000'000))
        .add(Rule("user-day").where("user").per(Period::day).max_count(1000));
  }
  static Transaction payment(const std::string& id, std::int64_t amount,
                             const std::string& merchant = "m-000042") {
    return {id,
            {{"merchant", merchant}, {"dept", "cmb"}, {"channel", "Ali"}, {"user", "u-7"}},
            amount,
            Clock::now()};
  }
  std::string record_key(const std::string& id) const { return limits.keys().transaction(id); }
  long long memory(const std::string& key) {
    return redis.command({"MEMORY", "USAGE", key, "SAMPLES", "0"}).as_integer();
  }
  Usage merchant_day(const std::string& merchant = "m-000042") {
    return limits.usage("merchant", Dimension{merchant}, Period::day);
  }
};

} // namespace

TEST_CASE_METHOD(RecordFixture,
                 "a transaction's record is one string of at most 160 bytes, kept for the "
                 "replay horizon whatever its windows",
                 "[record][redis][standalone]") {
  limits.set_rules(four_rules());
  REQUIRE(limits.consume(payment("pay-0000000001", 100)).allowed());
  REQUIRE(limits.reserve(payment("pay-0000000002", 100)).allowed());
  REQUIRE_FALSE(limits.consume(payment("pay-0000000003", 5000)).allowed());
  for (const char* id : {"pay-0000000001", "pay-0000000002", "pay-0000000003"}) {
    INFO(id);
    const std::string key = record_key(id);
    CHECK(redis.command({"TYPE", key}).as_string() == "string");
    CHECK(memory(key) <= 160);
    // 24 h, not the year rule's window: the record's life is the horizon
    const long long ttl = redis.command({"PTTL", key}).as_integer();
    CHECK(ttl > 0);
    CHECK(ttl <= 24 * 3600 * 1000);
  }
  // one rule: smaller still
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_amount(1000)));
  REQUIRE(limits.consume(payment("pay-0000000004", 100)).allowed());
  CHECK(memory(record_key("pay-0000000004")) <= 160);

  SECTION("the horizon is an option") {
    auto o = options();
    o.replay_horizon = 1h;
    LimitCounter short_lived(redis, limitcounter::Calendar("Asia/Shanghai"), o);
    short_lived.set_rules(four_rules());
    REQUIRE(short_lived.consume(payment("pay-0000000005", 100)).allowed());
    CHECK(redis.command({"PTTL", record_key("pay-0000000005")}).as_integer() <= 3600 * 1000);
  }
}

TEST_CASE_METHOD(RecordFixture, "transactions that moved the same counters share one counter set",
                 "[record][redis][standalone]") {
  limits.set_rules(four_rules());
  for (int i = 0; i < 20; ++i) {
    REQUIRE(limits.consume(payment("same-" + std::to_string(i), 10)).allowed());
  }
  REQUIRE(limits.consume(payment("other-0", 10, "m-other")).allowed());
  CHECK(keys_matching(prefix + "cs:*").size() == 2);
  // each record still gives back its own counters
  CHECK(limits.refund("other-0").refunded_now == 10);
  CHECK(merchant_day("m-other") == Usage{0, 0});
  CHECK(merchant_day() == Usage{20, 200});
}

TEST_CASE_METHOD(RecordFixture,
                 "a replay returns the first verdict and denial, and the counters as they are "
                 "now",
                 "[record][redis]") {
  limits.set_rules(four_rules());
  REQUIRE(limits.consume(payment("first", 900)).allowed());
  const Decision denied = limits.consume(payment("too-much", 200));
  REQUIRE_FALSE(denied.allowed());
  REQUIRE(denied.denial);
  CHECK(denied.denial->used == 900);

  REQUIRE(limits.refund("first", 500, "r-1").refunded_now == 500);
  const Decision replayed = limits.consume(payment("too-much", 200));
  CHECK(replayed.replayed);
  CHECK(replayed.verdict == Decision::Verdict::denied);
  REQUIRE(replayed.denial);
  CHECK(replayed.denial->rule == "merchant-day");
  CHECK(replayed.denial->metric == Metric::amount);
  CHECK(replayed.denial->limit == 1000);
  CHECK(replayed.denial->used == 900); // as it was when it was decided
  CHECK(replayed.denial->requested == 200);
  const auto day = std::find_if(replayed.rules.begin(), replayed.rules.end(),
                                [](const auto& rule) { return rule.rule == "merchant-day"; });
  REQUIRE(day != replayed.rules.end());
  // now; on a cluster the home record keeps the first decision's (docs: Decision::rules)
  CHECK(day->used == (limitcounter::testing::on_cluster() ? Usage{1, 900} : Usage{1, 400}));
  CHECK(merchant_day() == Usage{1, 400});
}

TEST_CASE_METHOD(RecordFixture,
                 "past the replay horizon a refund needs the original transaction, and gives "
                 "back its own windows",
                 "[record][redis][standalone]") {
  limits.set_rules(four_rules());
  const Transaction paid = payment("late", 300);
  REQUIRE(limits.consume(paid).allowed());
  REQUIRE(redis.command({"DEL", record_key("late")}).as_integer() == 1); // the horizon passed

  const Error unknown = error_of([&] { limits.refund("late", 100, "r-1"); });
  CHECK(unknown.code() == errc::not_found);
  CHECK_THAT(unknown.what(), Catch::Contains("\"late\"") && Catch::Contains("original"));
  CHECK(merchant_day() == Usage{1, 300}); // nothing moved

  // the original's counters, in the windows of its time
  const auto refunded = limits.refund(paid, 100, "r-1");
  CHECK(refunded.refunded_now == 100);
  CHECK(refunded.refunded_total == 100);
  CHECK_FALSE(refunded.replayed);
  CHECK(merchant_day() == Usage{1, 200});
  CHECK(limits.usage("dept", Dimension{"cmb"}, Period::month) == Usage{1, 200});
  CHECK(limits.refund(paid, 100, "r-1").replayed);
  // the full refund gives back the count too
  CHECK(limits.refund(paid).refunded_now == 200);
  CHECK(merchant_day() == Usage{0, 0});
  CHECK(limits.usage("user", Dimension{"u-7"}, Period::day) == Usage{0, 0});

  SECTION("while the record lives, it decides: a changed transaction is refused") {
    REQUIRE(limits.consume(payment("live", 100)).allowed());
    Transaction changed = payment("live", 100, "m-elsewhere");
    const Error refused = error_of([&] { limits.refund(changed, 50, "r-2"); });
    CHECK(refused.code() == errc::conflict);
    CHECK(merchant_day() == Usage{1, 100});
    CHECK(merchant_day("m-elsewhere") == Usage{0, 0});
  }
  SECTION("confirm and cancel of a reservation whose record is gone: its hold is gone too") {
    const Transaction held = payment("held", 100);
    REQUIRE(limits.reserve(held).allowed());
    REQUIRE(limits.cancel("held") == CancelResult::cancelled);
    REQUIRE(redis.command({"DEL", record_key("held")}).as_integer() == 1);
    const Error expired = error_of([&] { limits.confirm(held); });
    CHECK(expired.code() == errc::conflict);
    CHECK_THAT(expired.what(), Catch::Contains("expired"));
    CHECK(limits.cancel(held) == CancelResult::already_ended);
    CHECK(redis.command({"EXISTS", record_key("held")}).as_integer() == 0); // no tombstone
  }
}

TEST_CASE_METHOD(RecordFixture,
                 "consume_many decides up to 64 transactions in one script call, each on its own",
                 "[record][redis][standalone]") {
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_count(100)));
  std::vector<Transaction> batch;
  for (int i = 0; i < 130; ++i) {
    batch.push_back(payment("b-" + std::to_string(i), 1));
  }
  batch.push_back(payment("b-3", 1)); // the same id again, in the same call: a replay
  const long long before = command_calls(redis, "evalsha");
  const auto results = limits.consume_many(batch);
  CHECK(command_calls(redis, "evalsha") - before == 3); // 131 = 64 + 64 + 3
  REQUIRE(results.size() == 131);
  int allowed = 0;
  int denied = 0;
  for (std::size_t i = 0; i < 130; ++i) {
    const auto& decision = std::get<Decision>(results[i]);
    CHECK_FALSE(decision.replayed);
    (decision.allowed() ? allowed : denied) += 1;
    if (!decision.allowed()) {
      REQUIRE(decision.denial);
      CHECK(decision.denial->used == 100);
    }
  }
  CHECK(allowed == 100); // all or nothing per transaction, in order
  CHECK(denied == 30);
  const auto& again = std::get<Decision>(results[130]);
  CHECK(again.replayed);
  CHECK(again.allowed());
  CHECK(merchant_day() == Usage{100, 100});
}
