// The transaction record of limits (issue 14 item 1): one small string per transaction, kept
// for the replay horizon whatever the windows; replays without stored totals; reversals with
// the host's original transaction after the record is gone; batches decided per transaction.
#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>

#include <catch2/catch.hpp>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/limit_counter.hpp>

#include "limit_counter/codec/decide_arguments.hpp"
#include "limit_counter/declared_keys.hpp"
#include "shared/amount.hpp"
#include "support/outcome.hpp"
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
using limitcounter::testing::outcome;
using limitcounter::testing::script_calls;
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
  // The replay horizon passed for `id`: its record is gone (on a cluster, its home record and
  // every share record).
  void forget(const std::string& id) {
    const auto records = keys_matching(prefix + "*tx:*" + id + "*");
    REQUIRE(records.size() >= (limitcounter::testing::on_cluster() ? 2U : 1U));
    for (const auto& key : records) {
      REQUIRE(redis.command({"DEL", key}).as_integer() == 1);
    }
  }
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
  }
  // 24 h, not the year rule's window: the record's life is the horizon (a reservation's too: its
  // hold is released however late, see below)
  for (const char* id : {"pay-0000000001", "pay-0000000002", "pay-0000000003"}) {
    const long long ttl = redis.command({"PTTL", record_key(id)}).as_integer();
    CHECK(ttl > 0);
    CHECK(ttl <= 24 * 3600 * 1000);
  }
  // one rule: smaller still
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_amount(1000)));
  REQUIRE(limits.consume(payment("pay-0000000004", 100)).allowed());
  CHECK(memory(record_key("pay-0000000004")) <= 160);

  SECTION("a 36-character UUID and 10-character merchant and user ids: at most 160 bytes too") {
    const auto uuid = [](int n) {
      return "3f2504e0-4f89-11d3-9a0c-0305e82c33" + std::to_string(10 + n);
    };
    const auto long_payment = [&](int n, std::int64_t amount) {
      Transaction t = payment(uuid(n), amount, "M100234567");
      t.attributes["user"] = "U200000000";
      return t;
    };
    limits.set_rules(four_rules());
    REQUIRE(limits.consume(long_payment(1, 100)).allowed());
    REQUIRE(limits.reserve(long_payment(2, 100)).allowed());
    REQUIRE_FALSE(limits.consume(long_payment(3, 5000)).allowed());
    for (int n = 1; n <= 3; ++n) {
      INFO(uuid(n));
      CHECK(memory(record_key(uuid(n))) <= 160);
    }
    // the reservation's hold expiry is its hold set member's score: confirm still sees it
    const auto confirmed = limits.confirm(uuid(2), 60);
    CHECK(confirmed.amount == 60);
    CHECK(confirmed.released == 40);
  }
  SECTION("the horizon is an option") {
    auto o = options();
    o.replay_horizon = 1h;
    LimitCounter short_lived(redis, limitcounter::Calendar("Asia/Shanghai"), o);
    short_lived.set_rules(four_rules());
    REQUIRE(short_lived.consume(payment("pay-0000000005", 100)).allowed());
    CHECK(redis.command({"PTTL", record_key("pay-0000000005")}).as_integer() <= 3600 * 1000);
  }
}

TEST_CASE_METHOD(RecordFixture,
                 "a refunded record stays small: every refund replays its first result and "
                 "the sum of the givens is the refunded total",
                 "[record][redis][standalone]") {
  limits.set_rules(four_rules());
  const auto uuid_payment = [&](const std::string& uuid) {
    Transaction paid = payment(uuid, 100, "M100234567");
    paid.attributes["user"] = "U200000000";
    REQUIRE(limits.consume(paid).allowed());
  };
  // the full refund adds 4 characters to the record
  const std::string refunded_in_full = "3f2504e0-4f89-11d3-9a0c-0305e82c3300";
  uuid_payment(refunded_in_full);
  CHECK(limits.refund(refunded_in_full).refunded_now == 100);
  CHECK(memory(record_key(refunded_in_full)) <= 160);
  CHECK(limits.refund(refunded_in_full).replayed);

  // a partial refund (its id is kept), then the full refund (all that is left, and the count)
  const std::string uuid = "3f2504e0-4f89-11d3-9a0c-0305e82c3301";
  uuid_payment(uuid);
  CHECK(limits.refund(uuid, 30, "r-exact").refunded_now == 30);
  const auto rest = limits.refund(uuid);
  CHECK(rest.refunded_now == 70);
  CHECK(rest.refunded_total == 100);

  // each replays what it gave the first time, read back from the record
  const auto exact = limits.refund(uuid, 30, "r-exact");
  CHECK(exact.replayed);
  CHECK(exact.refunded_now == 30);
  CHECK(exact.refunded_total == 100);
  const auto full = limits.refund(uuid);
  CHECK(full.replayed);
  CHECK(full.refunded_now == 70);
  CHECK(error_of([&] { limits.refund(uuid, 31, "r-exact"); }).code() == errc::conflict);
  CHECK(error_of([&] { limits.refund(uuid, 1, "r-new"); }).code() == errc::invalid_argument);
  const auto record = limits.transaction_record(uuid);
  REQUIRE(record);
  CHECK(record->refunded == 100);
  CHECK(record->refunds.size() == 2);
  // the count went back once, with the full refund; nothing below zero
  CHECK(merchant_day("M100234567") == Usage{0, 0});
  CHECK(limits.usage("user", Dimension{"U200000000"}, Period::day) == Usage{0, 0});
}

TEST_CASE_METHOD(RecordFixture,
                 "transactions under the same rules and windows share one counter set, whatever "
                 "their dimension values",
                 "[record][redis][standalone]") {
  limits.set_rules(four_rules());
  for (int i = 0; i < 20; ++i) {
    REQUIRE(limits.consume(payment("same-" + std::to_string(i), 10)).allowed());
  }
  REQUIRE(limits.consume(payment("other-0", 10, "m-other")).allowed());
  CHECK(keys_matching(prefix + "cs:*").size() == 1);
  // other rules move other counters: another set
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_amount(1000)));
  REQUIRE(limits.consume(payment("other-1", 10, "m-other")).allowed());
  CHECK(keys_matching(prefix + "cs:*").size() == 2);
  limits.set_rules(four_rules());
  // each record still gives back its own counters
  CHECK(limits.refund("other-0").refunded_now == 10);
  CHECK(merchant_day("m-other") == Usage{1, 10});
  CHECK(limits.refund("other-1").refunded_now == 10);
  CHECK(merchant_day("m-other") == Usage{0, 0});
  CHECK(merchant_day() == Usage{20, 200});
}

TEST_CASE_METHOD(RecordFixture,
                 "a replay returns the first verdict and denial, and the counters as they are "
                 "now (none on a cluster)",
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
  if (limitcounter::testing::on_cluster()) {
    // the home record keeps no counter's totals (docs: Decision::rules)
    CHECK(replayed.rules.empty());
  } else {
    const auto day = std::find_if(replayed.rules.begin(), replayed.rules.end(),
                                  [](const auto& rule) { return rule.rule == "merchant-day"; });
    REQUIRE(day != replayed.rules.end());
    CHECK(day->used == Usage{1, 400}); // now
  }
  CHECK(merchant_day() == Usage{1, 400});
}

TEST_CASE_METHOD(RecordFixture,
                 "past the replay horizon a refund needs the original transaction, and gives "
                 "back its own windows",
                 "[record][redis]") {
  limits.set_rules(four_rules());
  const Transaction paid = payment("late", 300);
  REQUIRE(limits.consume(paid).allowed());
  forget("late");

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

  CHECK(limits.refund(paid).replayed);
  CHECK(limits.refund("late", 100, "r-1").replayed); // recorded again, for another horizon

  SECTION("while the record lives, it decides: a changed transaction is refused") {
    REQUIRE(limits.consume(payment("live", 100)).allowed());
    Transaction changed = payment("live", 100, "m-elsewhere");
    const Error refused = error_of([&] { limits.refund(changed, 50, "r-2"); });
    CHECK(refused.code() == errc::conflict);
    CHECK(merchant_day() == Usage{1, 100});
    CHECK(merchant_day("m-elsewhere") == Usage{0, 0});
  }
  SECTION("a reservation confirmed for less: its original is the confirmed or reserved amount") {
    Transaction held = payment("held-less", 100);
    REQUIRE(limits.reserve(held).allowed());
    REQUIRE(limits.confirm(held, 60).amount == 60);
    held.amount = 60;
    CHECK(limits.refund(held, 10, "r-a").refunded_now == 10);
    held.amount = 100;
    CHECK(limits.refund(held, 10, "r-b").refunded_now == 10);
    held.amount = 70;
    CHECK(error_of([&] { limits.refund(held, 10, "r-c"); }).code() == errc::conflict);
    CHECK(merchant_day() == Usage{1, 40}); // ("late" was refunded in full above)
  }
  SECTION("confirm and cancel of a reservation whose record is gone: its hold is gone too") {
    const Transaction held = payment("held", 100);
    REQUIRE(limits.reserve(held).allowed());
    REQUIRE(outcome(limits.cancel("held")) == std::pair(CancelResult::Status::cancelled, false));
    forget("held");
    const Error expired = error_of([&] { limits.confirm(held); });
    CHECK(expired.code() == errc::conflict);
    CHECK_THAT(expired.what(), Catch::Contains("expired"));
    CHECK(outcome(limits.cancel(held)) == std::pair(CancelResult::Status::expired, false));
    CHECK(redis.command({"EXISTS", record_key("held")}).as_integer() == 0); // no tombstone
  }
}

TEST_CASE_METHOD(RecordFixture,
                 "eight callers refunding one original past the horizon: one refund applies",
                 "[record][redis][race]") {
  limits.set_rules(four_rules());
  for (int round = 0; round < 10; ++round) {
    const Transaction paid = payment("late-" + std::to_string(round), 30);
    REQUIRE(limits.consume(paid).allowed());
    forget(paid.id);
    std::atomic<int> applied{0};
    std::atomic<int> failed{0};
    std::vector<std::thread> callers;
    for (int t = 0; t < 8; ++t) {
      callers.emplace_back([&] {
        try {
          const limitcounter::RefundResult result = limits.refund(paid, 10, "r-1");
          applied += result.replayed ? 0 : 1;
          failed += result.refunded_now == 10 ? 0 : 1;
        } catch (const Error&) {
          ++failed;
        }
      });
    }
    for (auto& caller : callers) {
      caller.join();
    }
    CHECK(applied == 1);
    CHECK(failed == 0);
  }
  // each of the 10 took 30 and gave back 10 once, in every window it counted in
  CHECK(merchant_day() == Usage{10, 200});
  CHECK(limits.usage("user", Dimension{"u-7"}, Period::day) == Usage{10, 200});
  CHECK(limits.usage("channel", Dimension{"Ali"}, Period::year) == Usage{10, 200});
}

TEST_CASE_METHOD(RecordFixture,
                 "concurrent consume_many batches sharing ids: one first decision per id",
                 "[record][redis][standalone][race]") {
  limits.set_rules(four_rules());
  std::vector<Transaction> ids;
  for (int i = 0; i < 64; ++i) {
    ids.push_back(payment("shared-" + std::to_string(i), 5));
  }
  std::atomic<int> first{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> batches;
  for (int t = 0; t < 4; ++t) {
    batches.emplace_back([&, t] {
      std::vector<Transaction> mine = ids; // each batch in its own order, some ids twice
      std::rotate(mine.begin(), mine.begin() + 16 * t, mine.end());
      mine.push_back(mine.front());
      for (const auto& result : limits.consume_many(mine)) {
        const auto* decision = std::get_if<Decision>(&result);
        if (decision == nullptr || !decision->allowed()) {
          ++failed;
        } else if (!decision->replayed) {
          ++first;
        }
      }
    });
  }
  for (auto& batch : batches) {
    batch.join();
  }
  CHECK(failed == 0);
  CHECK(first == 64);
  CHECK(merchant_day() == Usage{64, 320});
  CHECK(limits.usage("user", Dimension{"u-7"}, Period::day) == Usage{64, 320});
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
  // the script is loaded (another test may have flushed the scripts: a NOSCRIPT counts a call)
  REQUIRE(limits.consume(payment("warm-up", 1, "m-elsewhere")).allowed());
  const long long before = script_calls(redis);
  const auto results = limits.consume_many(batch);
  CHECK(script_calls(redis) - before == 3); // 131 = 64 + 64 + 3
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

TEST_CASE_METHOD(RecordFixture,
                 "a reservation confirmed for less: refunds by its confirmed amount, also past the "
                 "horizon",
                 "[record][redis][standalone]") {
  limits.set_rules(four_rules());
  const Transaction reserved = payment("rc", 1000);
  REQUIRE(limits.reserve(reserved).allowed());
  REQUIRE(limits.confirm("rc", 600).amount == 600);
  CHECK(limits.reserve(reserved).replayed); // a retry of the reserve still replays
  Transaction captured = reserved;
  captured.amount = 600;
  CHECK(limits.refund(captured, 100, "r-1").refunded_now == 100); // the record decides
  CHECK(limits.refund(reserved, 50, "r-2").refunded_now == 50);   // as reserved: the same one
  CHECK(merchant_day() == Usage{1, 450});
  Transaction other = captured;
  other.amount = 700;
  CHECK(error_of([&] { limits.refund(other, 10, "r-3"); }).code() == errc::conflict);
  // past the horizon the host brings what it captured, and refunds what it has not refunded
  // yet: the library no longer knows the earlier refunds
  REQUIRE(redis.command({"DEL", record_key("rc")}).as_integer() == 1);
  REQUIRE(limits.consume(payment("other", 300)).allowed());
  CHECK(limits.refund(captured, 450, "r-rest").refunded_now == 450);
  CHECK(limits.refund(captured, 450, "r-rest").replayed);
  CHECK(merchant_day() == Usage{2, 300}); // the other payment's 300 is untouched
}

// A counter set's text carries its expiry (its first window's end, the grace, the replay horizon),
// so a host whose options changed since the consume brings an original whose set has another
// name: the refund makes that set and gives back the same counters, once.
TEST_CASE_METHOD(RecordFixture,
                 "past the horizon a refund from a host with other options gives back once",
                 "[record][redis][standalone]") {
  limits.set_rules(four_rules());
  const Transaction paid = payment("other-options", 300);
  REQUIRE(limits.consume(paid).allowed());
  forget("other-options");
  REQUIRE(keys_matching(prefix + "cs:*").size() == 1);

  auto o = options();
  o.replay_horizon = 48h;
  o.window_grace = 2h;
  LimitCounter changed(redis, limitcounter::Calendar("Asia/Shanghai"), o);
  changed.set_rules(four_rules());
  const auto refunded = changed.refund(paid, 100, "r-1");
  CHECK(refunded.refunded_now == 100);
  CHECK_FALSE(refunded.replayed);
  CHECK(keys_matching(prefix + "cs:*").size() == 2); // the original's set under its new name
  CHECK(merchant_day() == Usage{1, 200});
  CHECK(limits.usage("dept", Dimension{"cmb"}, Period::month) == Usage{1, 200});
  CHECK(changed.refund(paid, 100, "r-1").replayed);
  CHECK(limits.refund("other-options", 100, "r-1").replayed); // the record names its set
  CHECK(limits.refund("other-options").refunded_now == 200);
  CHECK(merchant_day() == Usage{0, 0});
}

TEST_CASE_METHOD(RecordFixture,
                 "an abandoned reservation's hold is released however late, also after its "
                 "record is gone",
                 "[record][redis][standalone]") {
  auto o = options();
  o.reservation_timeout = 1ms;
  o.replay_horizon = 1s;
  LimitCounter short_lived(redis, limitcounter::Calendar("Asia/Shanghai"), o);
  short_lived.set_rules(four_rules());
  REQUIRE(short_lived.reserve(payment("held", 800)).allowed());
  // the record lives the horizon, like any other; the hold set and the counter set its member
  // names live until the windows' keys expire
  CHECK(redis.command({"PTTL", record_key("held")}).as_integer() <= 1000);
  for (const auto& key : keys_matching(prefix + "*holds")) {
    CHECK(redis.command({"PTTL", key}).as_integer() > 60 * 1000);
  }
  for (const auto& key : keys_matching(prefix + "cs:*")) {
    CHECK(redis.command({"PTTL", key}).as_integer() > 60 * 1000 + 3600 * 1000);
  }
  std::this_thread::sleep_for(1100ms); // past the hold and the horizon
  REQUIRE(redis.command({"EXISTS", record_key("held")}).as_integer() == 0);
  CHECK(merchant_day() == Usage{1, 800});                       // still held
  REQUIRE(short_lived.reserve(payment("next", 300)).allowed()); // its sweep releases "held"
  CHECK(merchant_day() == Usage{1, 300});
  CHECK(limits.usage("user", Dimension{"u-7"}, Period::day) == Usage{1, 300});
  CHECK(limits.usage("dept", Dimension{"cmb"}, Period::month) == Usage{1, 300});
}

TEST_CASE("a replay horizon shorter than a reservation is refused, naming it", "[record][redis]") {
  Redis redis{test_options()};
  limitcounter::LimitCounterOptions o;
  o.key_prefix = unique_prefix();
  for (const auto horizon : {0ms, -5ms, 1000ms}) {
    o.replay_horizon = horizon;
    const Error refused = error_of([&] { LimitCounter(redis, limitcounter::Calendar("UTC"), o); });
    CHECK(refused.code() == errc::invalid_argument);
    CHECK_THAT(refused.what(),
               Catch::Contains("replay_horizon " + std::to_string(horizon.count()) + "ms"));
  }
}

// a refund with the original that is refused (more than the original's amount)
// must write nothing: past the horizon the id stays forgotten, so the same id is decided anew
// and counted. The script recorded the original as consumed before it compared the amount
// (standalone: lua/limit.lua load_or_original; cluster: transaction_home.lua op adopt "create").
TEST_CASE_METHOD(RecordFixture, "a refused refund with the original writes nothing",
                 "[record][redis]") {
  limits.set_rules(four_rules());
  const Transaction paid = payment("late-too-much", 300);
  REQUIRE(limits.consume(paid).allowed());
  forget(paid.id);

  const Error refused = error_of([&] { limits.refund(paid, 301, "r-1"); });
  CHECK(refused.code() == errc::invalid_argument);
  CHECK(merchant_day() == Usage{1, 300});                         // nothing given back
  CHECK(keys_matching(prefix + "*tx:*" + paid.id + "*").empty()); // and nothing recorded

  // the id is forgotten: a consume of it is decided anew and counted (not a replay)
  const Decision again = limits.consume(paid);
  CHECK(again.allowed());
  CHECK_FALSE(again.replayed);
  CHECK(merchant_day() == Usage{2, 600});
}

// past the horizon, refunds with the original (two ids, each twice, and the full
// refund twice) race refunds by id of a third: once the host has retried every call that threw
// with the original, the counters hold the amount less what the record says was refunded.
TEST_CASE_METHOD(RecordFixture, "refunds with the original race refunds by id",
                 "[record][redis][race]") {
  limits.set_rules(four_rules());
  int disagreements = 0;
  for (int round = 0; round < 10; ++round) {
    const std::string merchant = "m-race-" + std::to_string(round);
    const Transaction paid = payment("race-" + std::to_string(round), 100, merchant);
    REQUIRE(limits.consume(paid).allowed());
    forget(paid.id);
    struct Call {
      std::optional<std::int64_t> amount;
      std::string refund_id;
      bool with_original;
    };
    const std::vector<Call> calls{{30, "A", true},  {30, "A", true},          {40, "B", true},
                                  {40, "B", true},  {std::nullopt, "", true}, {20, "C", false},
                                  {20, "C", false}, {std::nullopt, "", true}};
    std::vector<int> threw(calls.size(), 0);
    std::vector<std::thread> callers;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      callers.emplace_back([&, i] {
        try {
          if (calls[i].with_original) {
            limits.refund(paid, calls[i].amount, calls[i].refund_id);
          } else {
            limits.refund(paid.id, calls[i].amount, calls[i].refund_id);
          }
        } catch (const Error& e) {
          // refused (too much: the full refund came first), or unknown: retried below
          threw[i] = e.code() == errc::invalid_argument ? 0 : 1;
        }
      });
    }
    for (auto& caller : callers) {
      caller.join();
    }
    // the host's retries, with the original
    for (std::size_t i = 0; i < calls.size(); ++i) {
      if (threw[i] != 0) {
        try {
          limits.refund(paid, calls[i].amount, calls[i].refund_id);
        } catch (const Error&) {
        }
      }
    }
    const auto record = limits.transaction_record(paid.id);
    REQUIRE(record);
    const Usage usage = merchant_day(merchant);
    if (record->refunded > 100 || usage.amount != 100 - record->refunded ||
        usage.count != (record->refunded == 100 ? 0 : 1)) {
      ++disagreements;
      UNSCOPED_INFO("round " << round << ": refunded " << record->refunded << ", counters "
                             << usage.count << ":" << usage.amount);
    }
  }
  CHECK(disagreements == 0);
}

// refund ids that look like the encoding's parts (digits, ':', 'G', 'R',
// '*') keep their asked and given apart, replay, and sum to the refunded total.
TEST_CASE_METHOD(RecordFixture, "refund ids shaped like the refund encoding", "[record][redis]") {
  limits.set_rules(four_rules());
  const Transaction paid = payment("enc", 100);
  REQUIRE(limits.consume(paid).allowed());
  const std::vector<std::pair<std::string, std::int64_t>> refunds{
      {"7:7", 7}, {"G:1", 5}, {"R:2:3", 11}, {"-1", 13}, {"0", 1}, {"*", 2}};
  std::int64_t total = 0;
  for (const auto& [id, amount] : refunds) {
    INFO(id);
    total += amount;
    CHECK(limits.refund("enc", amount, id).refunded_total == total);
  }
  for (const auto& [id, amount] : refunds) {
    INFO(id);
    const auto again = limits.refund("enc", amount, id);
    CHECK(again.replayed);
    CHECK(again.refunded_now == amount);
    CHECK(again.refunded_total == total);
    CHECK(error_of([&] { limits.refund("enc", amount + 1, id); }).code() == errc::conflict);
  }
  CHECK(merchant_day() == Usage{1, 100 - total});
  const auto full = limits.refund("enc");
  CHECK(full.refunded_now == 100 - total);
  CHECK(limits.refund("enc").refunded_now == 100 - total);
  CHECK(error_of([&] { limits.refund("enc", 1, "late"); }).code() == errc::invalid_argument);
  CHECK(limits.refund("enc").replayed);
  const auto record = limits.transaction_record("enc");
  REQUIRE(record);
  CHECK(record->refunded == 100);
  CHECK(record->refunds.size() == refunds.size() + 1);
  CHECK(merchant_day() == Usage{0, 0});
  CHECK(limits.usage("user", Dimension{"u-7"}, Period::day) == Usage{0, 0});
}

// A decision's record lives the replay horizon by the server's clock (SET ... PX): a client whose
// clock is behind the server's by more than the horizon still gets a record, so that its retry
// replays instead of counting again. (A record expiring at the client's time would be gone at
// once.) Both forms of the call: a call of many, and a lone consume (op one).
TEST_CASE_METHOD(RecordFixture,
                 "a record lives the replay horizon by the server's clock, whatever the client's",
                 "[record][redis][standalone]") {
  const Rule day = Rule("merchant-day").where("merchant").per(Period::day).max_amount(1000);
  // the client's clock two horizons behind the server's
  const auto context = limitcounter::testing::decide_context(limits, Clock::now() - 48h);
  int counted = 0;
  for (const bool lone : {false, true}) {
    const Transaction tx = payment(lone ? "behind-lone" : "behind-many", 10);
    const auto call =
        limitcounter::detail::build_decide(limitcounter::LimitOp::consume, tx, {}, {&day}, context);
    const auto args =
        lone ? limitcounter::detail::lone_consume_args(std::vector(call.args)) : call.args;
    INFO(args.front());
    CHECK(redis.eval(limitcounter::scripts::limit, call.keys, args).at(0).as_integer() == 1);
    ++counted;
    const std::int64_t ttl = redis.command({"PTTL", call.keys.front()}).to_int64();
    CHECK(ttl > 23 * 3600 * 1000);
    CHECK(ttl <= 24 * 3600 * 1000);
    // the retry replays (code 5): counted once
    CHECK(redis.eval(limitcounter::scripts::limit, call.keys, args).at(0).as_integer() == 5);
    CHECK(merchant_day() == Usage{counted, 10 * counted});
  }
}

// The same guard on the other records a call may write: the record a refund makes from the
// original transaction it brings (its record gone), and a cancel's tombstone. Without it, the
// refund would give the counters back with no record to replay it (each retry giving back
// again), and the tombstone would be gone at once.
TEST_CASE_METHOD(RecordFixture,
                 "a reversal's record that would expire at once is refused, nothing written",
                 "[record][redis][standalone]") {
  const Rule day = Rule("merchant-day").where("merchant").per(Period::day).max_amount(1000);
  limits.set_rules(RuleSet().add(day));
  const Transaction tx = payment("past-original", 10);
  REQUIRE(limits.consume(tx).allowed());
  forget(tx.id);
  REQUIRE(merchant_day() == Usage{1, 10});
  // the client's clock two horizons behind the server's
  auto context = limitcounter::testing::decide_context(limits, Clock::now() - 48h);
  context.refuse_closed_windows = false;
  std::vector<std::string> refund{"refund", "-1", ""};
  const std::string counter_set =
      limitcounter::detail::append_original(refund, tx, {&day}, context);
  const std::vector<std::string> cancel{
      "cancel", std::to_string(limitcounter::detail::unix_millis(context.now)),
      std::to_string(limitcounter::detail::unix_millis(context.now + context.replay_horizon))};
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (const auto& [keys, args] :
         {std::pair{std::vector<std::string>{record_key(tx.id), counter_set}, refund},
          std::pair{std::vector<std::string>{record_key("past-tombstone")}, cancel}}) {
      const Error error = error_of([&] {
        limitcounter::detail::eval_declaring(redis, {&limitcounter::scripts::limit, keys, args});
      });
      CHECK_THAT(error.what(), Catch::Contains("would be gone at once"));
      CHECK(error.outcome() == limitcounter::Outcome::failed);
    }
  }
  CHECK(merchant_day() == Usage{1, 10});
  CHECK(redis.command({"EXISTS", record_key(tx.id)}).as_integer() == 0);
  CHECK(redis.command({"EXISTS", record_key("past-tombstone")}).as_integer() == 0);
}

// A refund whose reply is lost as its record's replay horizon ends is sent again (by the
// library, with the original transaction when the host gave it one). The refund kept the record
// ten minutes more, so the resend finds it and replays: before, it made the record anew from the
// original and gave back a second time.
TEST_CASE_METHOD(RecordFixture, "a refund resent past the record's horizon replays",
                 "[record][redis]") {
  limitcounter::LimitCounterOptions brief_options = options();
  brief_options.replay_horizon = 2s;
  brief_options.reservation_timeout = 1s;
  LimitCounter brief{redis, limitcounter::Calendar("Asia/Shanghai"), brief_options};
  brief.set_rules(
      RuleSet().add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(1000)));
  const Transaction tx = payment("refund-at-horizon", 300);
  REQUIRE(brief.consume(tx).allowed());
  std::this_thread::sleep_for(1500ms); // the record has about 500 ms left
  REQUIRE(brief.refund(tx, 100, "r1").refunded_now == 100);
  REQUIRE(merchant_day() == Usage{1, 200});
  const auto records = keys_matching(prefix + "*tx:*refund-at-horizon*");
  REQUIRE(records.size() >= (limitcounter::testing::on_cluster() ? 2U : 1U));
  for (const auto& key : records) {
    INFO(key);
    CHECK(redis.command({"PTTL", key}).as_integer() > 60000);
  }
  std::this_thread::sleep_for(1500ms);             // past the consume's horizon
  const auto resent = brief.refund(tx, 100, "r1"); // as the library resends it
  CHECK(resent.replayed);
  CHECK(resent.refunded_now == 100);
  CHECK(merchant_day() == Usage{1, 200});
}

// lua/limit.lua reads and checks everything before its first write: a reversal that meets a
// key it cannot use (a counter hash replaced by a string) fails having given nothing back,
// and its record is as it was (a script that failed half way used to flush the counters it had
// given back in its cache, while the record still said "not refunded": every retry gave back
// again).
TEST_CASE_METHOD(RecordFixture, "a refund that fails at a later counter has written nothing",
                 "[record][redis][standalone]") {
  limits.set_rules(
      RuleSet()
          .add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(1000))
          .add(Rule("merchant-month").where("merchant").per(Period::month).max_amount(1'000'000)));
  REQUIRE(limits.consume(payment("fail-late-1", 300)).allowed());
  REQUIRE(limits.consume(payment("fail-late-2", 600)).allowed());
  const auto months = keys_matching(prefix + "*:month:*");
  REQUIRE(months.size() == 1);
  // the month counter becomes a string: the refund fails at it, after the day counter
  REQUIRE(redis.command({"SET", months.front(), "not a hash"}).as_string() == "OK");
  const std::string record_before = redis.command({"GET", record_key("fail-late-1")}).as_string();
  for (int attempt = 0; attempt < 2; ++attempt) {
    const Error error = error_of([&] { limits.refund("fail-late-1"); });
    CHECK_THAT(error.what(), Catch::Contains("WRONGTYPE"));
    CHECK(error.outcome() == limitcounter::Outcome::failed);
    CHECK(merchant_day() == Usage{2, 900});
    CHECK(redis.command({"GET", record_key("fail-late-1")}).as_string() == record_before);
  }
}
