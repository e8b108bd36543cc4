// The exhausted cache (LimitCounterOptions::exhausted_cache) against a real server: what it
// decides without Redis is proven not sent (INFO commandstats), and every event that may
// free room ends it.
#include <catch2/catch.hpp>

#include <thread>

#include <date/date.h>
#include <date/tz.h>

#include <limitcounter/limit_counter.hpp>

#include "support/outcome.hpp"
#include "support/probe.hpp"
#include "support/redis_server.hpp"
#include "support/topology.hpp"

using namespace std::chrono_literals;
using limitcounter::Decision;
using limitcounter::LimitCounter;
using limitcounter::LimitCounterOptions;
using limitcounter::Metric;
using limitcounter::Period;
using limitcounter::Redis;
using limitcounter::Rule;
using limitcounter::RuleSet;
using limitcounter::TimePoint;
using limitcounter::Transaction;
using limitcounter::TransactionState;
using limitcounter::testing::command_calls;
using limitcounter::testing::outcome;
using limitcounter::testing::script_calls;
using limitcounter::testing::test_options;
using limitcounter::testing::unique_prefix;

namespace {

constexpr const char* zone = "Asia/Shanghai";

// Noon of 11 November next year in Shanghai: its windows are open.
TimePoint next_year_noon() {
  const auto today =
      date::year_month_day{date::floor<date::days>(std::chrono::system_clock::now())};
  const auto day = date::local_days{date::year{int(today.year()) + 1} / 11 / 11};
  return date::make_zoned(zone, day + 12h).get_sys_time();
}

RuleSet daily_count(std::int64_t limit) {
  return RuleSet().add(Rule("merchant-day").where("merchant").per(Period::day).max_count(limit));
}

struct CacheFixture {
  Redis redis{test_options()};
  std::string prefix = unique_prefix() + "exhausted:";
  TimePoint at = next_year_noon();
  int next_id = 0;

  // A LimitCounter on this fixture's keys; its exhausted cache on with `staleness` (or off).
  LimitCounter counter(std::optional<std::chrono::milliseconds> staleness,
                       std::chrono::milliseconds reservation_timeout = 15min) const {
    LimitCounterOptions options;
    options.key_prefix = prefix;
    options.max_future_skew.reset(); // dated next year
    options.reservation_timeout = reservation_timeout;
    // these tests time expiry: on a cluster the shares' holds expire with the home's
    options.cluster_hold_grace = std::chrono::milliseconds{0};
    if (staleness) {
      options.exhausted_cache.enabled = true;
      options.exhausted_cache.max_staleness = *staleness;
    }
    return LimitCounter(redis, limitcounter::Calendar(zone), options);
  }
  Transaction tx(std::int64_t amount = 100, const std::string& merchant = "m1") {
    return Transaction{"ex-" + std::to_string(++next_id), {{"merchant", merchant}}, amount, at};
  }
  long long scripts_run() { return script_calls(redis); }
};

} // namespace

TEST_CASE_METHOD(CacheFixture, "exhausted cache off (the default): every denial asks Redis",
                 "[exhausted_cache][redis][standalone]") {
  LimitCounter limits = counter(std::nullopt);
  limits.set_rules(daily_count(1));
  REQUIRE(limits.consume(tx()).allowed());
  REQUIRE_FALSE(limits.consume(tx()).allowed());
  const long long before = scripts_run();
  const Decision again = limits.consume(tx());
  CHECK_FALSE(again.allowed());
  CHECK_FALSE(again.cached);
  CHECK(scripts_run() == before + 1);
}

TEST_CASE_METHOD(CacheFixture, "exhausted cache on: the second denial is decided without Redis",
                 "[exhausted_cache][redis][standalone]") {
  LimitCounter limits = counter(1h);
  limits.set_rules(daily_count(2));
  REQUIRE(limits.consume(tx()).allowed());
  REQUIRE(limits.consume(tx()).allowed());
  const Decision first = limits.consume(tx());
  REQUIRE_FALSE(first.allowed());
  CHECK_FALSE(first.cached); // Redis's own denial

  const long long before = scripts_run();
  const Transaction second_tx = tx();
  const Decision second = limits.consume(second_tx);
  const Decision peek = limits.check(tx());
  const auto batch = limits.consume_many({tx(), tx(100, "m2")});
  CHECK(scripts_run() == before + 1); // only m2 was sent
  CHECK(second.verdict == Decision::Verdict::denied);
  CHECK(second.cached);
  CHECK(second.state == TransactionState::denied);
  REQUIRE(second.denial);
  CHECK(second.denial->rule == "merchant-day");
  CHECK(second.denial->metric == Metric::count);
  CHECK(second.denial->used == 2);
  CHECK(second.denial->limit == 2);
  CHECK(peek.cached);
  CHECK(peek.dry_run);
  CHECK(peek.state == TransactionState::none); // a check puts the id in no state
  REQUIRE(batch.size() == 2);
  CHECK(std::get<Decision>(batch[0]).cached);
  CHECK(std::get<Decision>(batch[1]).allowed());
  // A cached denial records nothing under its id.
  CHECK(redis.command({"EXISTS", limits.keys().transaction(second_tx.id)}).as_integer() == 0);
}

TEST_CASE_METHOD(CacheFixture, "exhausted cache: a full amount limit denies only what does not fit",
                 "[exhausted_cache][redis][standalone]") {
  LimitCounter limits = counter(1h);
  limits.set_rules(
      RuleSet().add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(1000)));
  REQUIRE(limits.consume(tx(900)).allowed());
  REQUIRE_FALSE(limits.consume(tx(200)).allowed());
  long long before = scripts_run();
  const Decision big = limits.consume(tx(101));
  CHECK(big.cached);
  CHECK(big.denial->requested == 101);
  CHECK(scripts_run() == before);
  const Decision small = limits.consume(tx(100)); // fits: Redis decides
  CHECK(small.allowed());
  CHECK(scripts_run() == before + 1);
}

TEST_CASE_METHOD(CacheFixture,
                 "exhausted cache: a refund in another instance is seen after "
                 "max_staleness",
                 "[exhausted_cache][redis]") {
  LimitCounter elsewhere = counter(std::nullopt); // another node of the fleet
  LimitCounter here = counter(200ms);
  elsewhere.set_rules(daily_count(1));
  here.set_rules(daily_count(1));
  const Transaction paid = tx();
  REQUIRE(elsewhere.consume(paid).allowed());
  REQUIRE_FALSE(here.consume(tx()).allowed()); // from Redis: now cached here
  REQUIRE(elsewhere.refund(paid.id).refunded_now == 100);
  // Here the denial may be reused for up to 200 ms; then Redis answers, with the room.
  bool allowed = false;
  const auto deadline = std::chrono::steady_clock::now() + 30s; // a loaded machine
  while (!allowed && std::chrono::steady_clock::now() < deadline) {
    const Decision d = here.consume(tx());
    allowed = d.allowed();
    if (!allowed) {
      REQUIRE(d.cached); // Redis itself has room: only the cache may still deny
      std::this_thread::sleep_for(20ms);
    }
  }
  CHECK(allowed);
}

TEST_CASE_METHOD(CacheFixture, "exhausted cache: a refund, cancel or confirm here ends it at once",
                 "[exhausted_cache][redis]") {
  LimitCounter elsewhere = counter(std::nullopt);
  LimitCounter here = counter(1h);
  const RuleSet rules = RuleSet().add(
      Rule("merchant-day").where("merchant").per(Period::day).max_count(1).max_amount(1000));
  elsewhere.set_rules(rules);
  here.set_rules(rules);
  const auto full_then_cached = [&] {
    REQUIRE_FALSE(here.consume(tx()).allowed());
    REQUIRE(here.consume(tx()).cached);
  };

  SECTION("refund") {
    const Transaction paid = tx();
    REQUIRE(here.consume(paid).allowed());
    full_then_cached();
    here.refund(paid.id);
  }
  SECTION("cancel") {
    const Transaction held = tx(); // held elsewhere: a hold of this process is never cached
    REQUIRE(elsewhere.reserve(held).allowed());
    full_then_cached();
    REQUIRE(outcome(here.cancel(held.id)) ==
            std::pair(limitcounter::CancelResult::Status::cancelled, false));
  }
  SECTION("confirm at less") {
    here.set_rules(
        RuleSet().add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(1000)));
    const Transaction held = tx(1000);
    REQUIRE(elsewhere.reserve(held).allowed());
    full_then_cached();
    REQUIRE(here.confirm(held.id, 500).released == 500);
  }
  const Decision after = here.consume(tx());
  CHECK(after.allowed());
  CHECK_FALSE(after.cached);
}

TEST_CASE_METHOD(CacheFixture, "exhausted cache: new rules end it", "[exhausted_cache][redis]") {
  LimitCounter limits = counter(1h);
  limits.set_rules(daily_count(1));
  REQUIRE(limits.consume(tx()).allowed());
  REQUIRE_FALSE(limits.consume(tx()).allowed());
  REQUIRE(limits.consume(tx()).cached);
  limits.set_rules(daily_count(2));
  CHECK(limits.consume(tx()).allowed());
}

TEST_CASE_METHOD(CacheFixture,
                 "exhausted cache: the window's end (by the transaction's time) "
                 "ends it",
                 "[exhausted_cache][redis]") {
  LimitCounter limits = counter(1h);
  limits.set_rules(
      RuleSet().add(Rule("merchant-minute").where("merchant").per(Period::minute).max_count(1)));
  REQUIRE(limits.consume(tx()).allowed());
  REQUIRE_FALSE(limits.consume(tx()).allowed());
  REQUIRE(limits.consume(tx()).cached);
  at += 1min; // the next minute
  const Decision next = limits.consume(tx());
  CHECK(next.allowed());
  CHECK_FALSE(next.cached);
}

TEST_CASE_METHOD(CacheFixture,
                 "exhausted cache: a counter this process holds a reservation on "
                 "is not cached; its expiry frees the room",
                 "[exhausted_cache][redis]") {
  LimitCounter limits = counter(1h, 300ms);
  limits.set_rules(daily_count(1));
  REQUIRE(limits.reserve(tx()).allowed());
  REQUIRE_FALSE(limits.consume(tx()).allowed());
  const Decision again = limits.consume(tx());
  CHECK_FALSE(again.allowed());
  CHECK_FALSE(again.cached); // the hold may expire: Redis decides
  CHECK(limitcounter::testing::eventually([&] { return limits.consume(tx()).allowed(); }));
}
