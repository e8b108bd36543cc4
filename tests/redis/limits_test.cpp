#include <catch2/catch.hpp>

#include <atomic>
#include <functional>
#include <iterator>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include <date/date.h>
#include <date/tz.h>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/limit_counter.hpp>

#include "limit_counter/declared_keys.hpp"
#include "shared/amount.hpp"
#include "support/outcome.hpp"
#include "support/probe.hpp"
#include "support/redis_server.hpp"
#include "support/topology.hpp"

using namespace std::chrono_literals;
using limitcounter::CancelResult;
using limitcounter::Clock;
using limitcounter::CounterKeys;
using limitcounter::Decision;
using limitcounter::Dimension;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::LimitCounter;
using limitcounter::LimitCounterOptions;
using limitcounter::Metric;
using limitcounter::Period;
using limitcounter::Redis;
using limitcounter::RedisOptions;
using limitcounter::RefundResult;
using limitcounter::Reply;
using limitcounter::Rule;
using limitcounter::RuleSet;
using limitcounter::TimePoint;
using limitcounter::Transaction;
using limitcounter::TransactionState;
using limitcounter::Usage;
using limitcounter::testing::error_of;
using limitcounter::testing::outcome;
using limitcounter::testing::test_options;
using limitcounter::testing::unique_prefix;

namespace {

constexpr const char* zone = "Asia/Shanghai";

// A local time next year, so windows are open and keys get real TTLs.
TimePoint next_year_local(unsigned month, unsigned day, std::chrono::minutes time_of_day = 12h) {
  const auto today =
      date::year_month_day{date::floor<date::days>(std::chrono::system_clock::now())};
  const auto local_day =
      date::local_days{date::year{int(today.year()) + 1} / date::month{month} / date::day{day}};
  return date::make_zoned(zone, local_day + time_of_day).get_sys_time();
}

struct LimitsFixture {
  // (a cluster_hold_grace of 0 by default: these tests time expiry, and on a cluster the shares'
  // holds then expire with the home's; unset, the library's default)
  explicit LimitsFixture(std::chrono::milliseconds reservation_timeout = 15min,
                         std::optional<std::chrono::milliseconds> cluster_hold_grace = 0ms)
      : limits{redis, limitcounter::Calendar(zone),
               options(reservation_timeout, cluster_hold_grace)} {}

  Redis redis{test_options()};
  std::string prefix = unique_prefix() + "trans:limit:";
  LimitCounter limits;
  TimePoint at = next_year_local(11, 11);
  std::atomic<int> next_id{0};

  LimitCounterOptions
  options(std::chrono::milliseconds reservation_timeout,
          std::optional<std::chrono::milliseconds> cluster_hold_grace = 0ms) const {
    LimitCounterOptions o;
    o.key_prefix = prefix;
    o.reservation_timeout = reservation_timeout;
    o.cluster_hold_grace = cluster_hold_grace;
    o.max_future_skew.reset(); // the tests date transactions next year
    return o;
  }

  Transaction tx(std::int64_t amount, std::string merchant = "m1", std::string dept = "cmb") {
    Transaction t;
    t.id = "tx-" + std::to_string(++next_id);
    t.attributes = {{"merchant", std::move(merchant)},
                    {"channel", "Ali"},
                    {"transType", "Deduct"},
                    {"dept", std::move(dept)}};
    t.amount = amount;
    t.time = at;
    return t;
  }
  Usage used(const std::string& counter, const Dimension& dimension, Period period,
             TimePoint when) {
    return limits.usage(counter, dimension, period, when);
  }
  // Everything under this fixture's prefix, key by key, with values: a snapshot.
  std::vector<std::string> snapshot() {
    std::vector<std::string> out;
    for (const auto& key : limitcounter::testing::keys_matching(prefix + "*")) {
      out.push_back(key + " => " + redis.command({"DUMP", key}).debug_string());
    }
    return out;
  }
};

struct ShortReservations : LimitsFixture {
  ShortReservations() : LimitsFixture(300ms) {}
};

// Short holds with the library's cluster_hold_grace: a confirm the home record takes before the
// hold's end reaches the shares before their holds run out.
struct ShortReservationsWithGrace : LimitsFixture {
  ShortReservationsWithGrace() : LimitsFixture(300ms, std::nullopt) {}
};

} // namespace

TEST_CASE_METHOD(LimitsFixture, "a count limit admits exactly its limit", "[limits][redis]") {
  limits.set_rules(
      RuleSet().add(Rule("merchant-day").where("merchant").per(Period::day).max_count(10)));
  for (int i = 0; i < 10; ++i) {
    const Decision d = limits.consume(tx(100));
    REQUIRE(d.allowed());
    CHECK(d.rules.at(0).remaining_count() == 9 - i);
  }
  const Decision eleventh = limits.consume(tx(100));
  CHECK(eleventh.verdict == Decision::Verdict::denied);
  REQUIRE(eleventh.denial);
  CHECK(eleventh.denial->rule == "merchant-day");
  CHECK(eleventh.denial->metric == Metric::count);
  CHECK(eleventh.denial->limit == 10);
  CHECK(eleventh.denial->used == 10);
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{10, 1000});

  // raising the limit keeps the counter and admits two more
  limits.set_rules(
      RuleSet().add(Rule("merchant-day").where("merchant").per(Period::day).max_count(12)));
  CHECK(limits.consume(tx(100)).allowed());
  CHECK(limits.consume(tx(100)).allowed());
  CHECK_FALSE(limits.consume(tx(100)).allowed());
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{12, 1200});
}

TEST_CASE_METHOD(LimitsFixture, "an amount limit admits an exact fit", "[limits][redis]") {
  limits.set_rules(
      RuleSet().add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(1000)));
  CHECK(limits.consume(tx(600)).allowed());
  const Decision denied = limits.consume(tx(500));
  CHECK_FALSE(denied.allowed());
  CHECK(denied.denial->metric == Metric::amount);
  CHECK(denied.denial->used == 600);
  CHECK(denied.denial->requested == 500);
  const Decision fit = limits.consume(tx(400));
  CHECK(fit.allowed());
  CHECK(fit.rules.at(0).remaining_amount() == 0);
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{2, 1000});
}

TEST_CASE_METHOD(LimitsFixture, "all or nothing: a full month denies and the day does not move",
                 "[limits][redis]") {
  limits.set_rules(RuleSet()
                       .add(Rule("day").where("merchant").per(Period::day).max_amount(10000))
                       .add(Rule("month").where("merchant").per(Period::month).max_amount(1500))
                       .add(Rule("single").where("merchant").per_transaction().max_amount(500)));
  CHECK(limits.consume(tx(500)).allowed());
  at += 24h;
  CHECK(limits.consume(tx(500)).allowed());
  CHECK(limits.consume(tx(500)).allowed());
  const auto before = snapshot();
  const Decision month_full = limits.consume(tx(1));
  CHECK(month_full.denial->rule == "month");
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{2, 1000});
  CHECK(used("merchant", Dimension{"m1"}, Period::month, at) == Usage{3, 1500});

  const Decision single = limits.consume(tx(501));
  CHECK(single.denial->rule == "single");
  CHECK(single.denial->metric == Metric::single_amount);
  // neither denial moved any counter
  const auto after = snapshot();
  std::size_t changed = 0;
  for (std::size_t i = 0; i < after.size(); ++i) {
    changed += after[i].find(":tx:") == std::string::npos &&
               std::find(before.begin(), before.end(), after[i]) == before.end();
  }
  CHECK(changed == 0);
}

TEST_CASE_METHOD(LimitsFixture, "an exact rule overrides the wildcard for its value only",
                 "[limits][redis]") {
  limits.set_rules(RuleSet()
                       .add(Rule("bank").where("dept").per(Period::day).max_count(1))
                       .add(Rule("bank-cmb").where("dept", "cmb").per(Period::day).max_count(3)));
  for (int i = 0; i < 3; ++i) {
    CHECK(limits.consume(tx(1, "m1", "cmb")).allowed());
  }
  CHECK(limits.consume(tx(1, "m1", "cmb")).denial->rule == "bank-cmb");
  CHECK(limits.consume(tx(1, "m1", "cib")).allowed());
  CHECK(limits.consume(tx(1, "m1", "cib")).denial->rule == "bank");
}

TEST_CASE_METHOD(LimitsFixture, "64 threads never pass the limits and the counters add up",
                 "[limits][redis][concurrency]") {
  limits.set_rules(RuleSet()
                       .add(Rule("count").where("merchant").per(Period::day).max_count(300))
                       .add(Rule("amount").where("merchant").per(Period::month).max_amount(50000)));
  std::atomic<std::int64_t> accepted_count{0};
  std::atomic<std::int64_t> accepted_amount{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 64; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 12; ++i) {
        Transaction one = tx(0);
        one.id = "c-" + std::to_string(t) + "-" + std::to_string(i);
        one.amount = 1 + (t * 7 + i * 13) % 97;
        if (limits.consume(one).allowed()) {
          ++accepted_count;
          accepted_amount += one.amount;
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  CHECK(accepted_count <= 300);
  CHECK(accepted_amount <= 50000);
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) ==
        Usage{accepted_count, accepted_amount});
  CHECK(used("merchant", Dimension{"m1"}, Period::month, at) ==
        Usage{accepted_count, accepted_amount});
}

TEST_CASE_METHOD(LimitsFixture, "the same id counts once, sequentially and concurrently",
                 "[limits][redis][idempotency]") {
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_count(1000)));
  const Transaction once = tx(250);
  const Decision first = limits.consume(once);
  for (int i = 0; i < 99; ++i) {
    const Decision again = limits.consume(once);
    CHECK(again.replayed);
    CHECK(again.allowed());
    // the counters as they are now; none on a cluster, whose home record keeps no counter's
    // totals (docs: Decision::rules)
    if (limitcounter::testing::on_cluster()) {
      CHECK(again.rules.empty());
    } else {
      CHECK(again.rules.at(0).used == first.rules.at(0).used);
    }
  }
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{1, 250});

  const Transaction racing = tx(10);
  std::atomic<int> fresh{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 20; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 5; ++i) {
        fresh += limits.consume(racing).replayed ? 0 : 1;
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  CHECK(fresh == 1);
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{2, 260});

  Transaction changed = once;
  changed.amount = 251;
  CHECK_THROWS_MATCHES(limits.consume(changed), Error, Catch::Predicate<Error>([](const Error& e) {
                         return e.code() == errc::conflict;
                       }));
  changed = once;
  changed.attributes["dept"] = "cib";
  CHECK_THROWS_AS(limits.consume(changed), Error);
}

TEST_CASE_METHOD(LimitsFixture,
                 "rules changing while threads consume: each decision counts under the rules it "
                 "reports",
                 "[limits][redis][race]") {
  // Two rule sets over other counters: a call built from the other set's rules (a stale call
  // template, say) would count where its decision's version says it did not.
  const RuleSet by_merchant =
      RuleSet().add(Rule("m").where("merchant").per(Period::day).max_count(100000));
  const RuleSet by_dept = RuleSet().add(Rule("d").where("dept").per(Period::day).max_count(100000));
  limits.set_rules(by_merchant, 1);
  std::atomic<bool> done{false};
  std::atomic<int> under_merchant{0};
  std::atomic<int> under_dept{0};
  std::atomic<int> failed{0};
  std::thread switcher([&] {
    for (std::uint64_t version = 2; !done; ++version) {
      limits.set_rules(version % 2 == 1 ? by_merchant : by_dept, version);
      std::this_thread::yield();
    }
  });
  const auto count = [&](const Decision& decision) {
    if (!decision.allowed() || decision.replayed) {
      ++failed;
    } else {
      ++(decision.rule_set_version % 2 == 1 ? under_merchant : under_dept);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        if (t % 2 == 0) {
          count(limits.consume(tx(1)));
          continue;
        }
        std::vector<Transaction> batch{tx(1), tx(1), tx(1)};
        for (const auto& result : limits.consume_many(batch)) {
          const auto* decision = std::get_if<Decision>(&result);
          if (decision == nullptr) {
            ++failed;
          } else {
            count(*decision);
          }
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  done = true;
  switcher.join();
  CHECK(failed == 0);
  CHECK(under_merchant + under_dept == 4 * 40 + 4 * 40 * 3);
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at).count == under_merchant);
  CHECK(used("dept", Dimension{"cmb"}, Period::day, at).count == under_dept);
}

TEST_CASE_METHOD(LimitsFixture, "a denied id replayed later stays denied",
                 "[limits][redis][idempotency]") {
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_amount(100)));
  const Transaction big = tx(150);
  CHECK_FALSE(limits.consume(big).allowed());
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_amount(1000)));
  const Decision replay = limits.consume(big);
  CHECK(replay.replayed);
  CHECK_FALSE(replay.allowed());
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{});
}

TEST_CASE("64 threads share one Redis at default settings: they queue, none is refused a "
          "connection",
          "[limits][redis][concurrency]") {
  const RedisOptions defaults;
  RedisOptions options = test_options(); // the test server, with the library's own defaults
  options.connect_timeout = defaults.connect_timeout;
  options.command_timeout = defaults.command_timeout;
  options.call_budget = defaults.call_budget;
  options.pool_size = defaults.pool_size;
  options.pool_wait_timeout = defaults.pool_wait_timeout;
  Redis redis(options);
  LimitCounterOptions limit_options;
  limit_options.key_prefix = unique_prefix() + "trans:limit:";
  limit_options.max_future_skew.reset();
  LimitCounter limits(redis, limitcounter::Calendar(zone), limit_options);
  limits.set_rules(
      RuleSet().add(Rule("day").where("merchant").per(Period::day).max_count(1'000'000)));
  std::atomic<int> exhausted{0};
  std::atomic<int> allowed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 64; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        Transaction tx{"q" + std::to_string(t) + "-" + std::to_string(i), {{"merchant", "m1"}}, 1};
        tx.time = next_year_local(11, 11);
        try {
          allowed += limits.consume(tx).allowed() ? 1 : 0;
        } catch (const Error& e) {
          // a sanitizer build on two cores may time out: this test is about the pool
          exhausted += e.code() == errc::pool_exhausted ? 1 : 0;
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  CHECK(exhausted == 0);
  CHECK(allowed > 0);
}

TEST_CASE_METHOD(LimitsFixture, "a per-transaction denial is recorded under its id",
                 "[limits][redis][idempotency]") {
  limits.set_rules(RuleSet()
                       .add(Rule("single").where("merchant").per_transaction().max_amount(1000))
                       .add(Rule("day").where("merchant").per(Period::day).max_amount(100000)));
  const Transaction big = tx(2000);
  const Decision denied = limits.consume(big);
  REQUIRE_FALSE(denied.allowed());
  CHECK(denied.denial->rule == "single");
  CHECK(denied.denial->metric == Metric::single_amount);
  CHECK(denied.denial->limit == 1000);
  CHECK(denied.denial->requested == 2000);

  const Decision replay = limits.consume(big);
  CHECK(replay.replayed);
  CHECK(replay.denial->metric == Metric::single_amount);
  // the same id cannot come back smaller and pass
  Transaction smaller = big;
  smaller.amount = 500;
  CHECK(error_of([&] { limits.consume(smaller); }).code() == errc::conflict);
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{});
}

TEST_CASE("an expired hold never denies, however many expired before it",
          "[limits][redis][reserve]") {
  LimitsFixture fixture(300ms);
  auto& limits = fixture.limits;
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_amount(70)));
  for (int i = 0; i < 70; ++i) {
    REQUIRE(limits.reserve(fixture.tx(1)).allowed());
  }
  std::this_thread::sleep_for(400ms); // every hold is past its 300 ms now
  const Transaction all = fixture.tx(70);
  const Decision decision = limits.consume(all);
  CHECK(decision.allowed());
  CHECK(fixture.used("merchant", Dimension{"m1"}, Period::day, fixture.at) == Usage{1, 70});
  CHECK(limits.consume(all).allowed()); // and the replay says so too
}

TEST_CASE_METHOD(LimitsFixture, "a count-only rule still refuses totals past 2^53 - 1",
                 "[limits][redis][overflow]") {
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_count(10)));
  const std::int64_t near_top = (std::int64_t{1} << 53) - 10;
  limits.add("merchant", Dimension{"m1"}, {Period::day}, 0, near_top, at);
  const Error error = error_of([&] { limits.consume(tx(20)); });
  CHECK(error.code() == errc::precision_overflow);
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{0, near_top});
}

TEST_CASE_METHOD(LimitsFixture, "an amount-only rule still refuses a count past 2^53 - 1",
                 "[limits][redis][overflow]") {
  limits.set_rules(
      RuleSet().add(Rule("day").where("merchant").per(Period::day).max_amount(1'000'000)));
  const std::int64_t top = limitcounter::max_exact_integer;
  limits.add("merchant", Dimension{"m1"}, {Period::day}, top, 0, at);
  const Error error = error_of([&] { limits.consume(tx(20)); });
  CHECK(error.code() == errc::precision_overflow);
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{top, 0});
}

TEST_CASE_METHOD(LimitsFixture, "no rules set is an error; an empty rule set is a choice",
                 "[limits][redis]") {
  const Transaction first = tx(10);
  const Error error = error_of([&] { limits.consume(first); });
  CHECK(error.code() == errc::invalid_argument);
  CHECK_THAT(error.what(), Catch::Contains("no rules") && Catch::Contains(first.id));
  CHECK(snapshot().empty());
  limits.set_rules(RuleSet());
  CHECK(limits.consume(first).allowed());
}

TEST_CASE_METHOD(LimitsFixture, "consume refuses closed windows and far-future dates",
                 "[limits][redis]") {
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_amount(100)));
  Transaction old = tx(10);
  old.time = std::chrono::system_clock::now() - 48h; // its day ended more than the grace ago
  const Error closed = error_of([&] { limits.consume(old); });
  CHECK(closed.code() == errc::window_closed);
  // `add` says the same of the same window
  CHECK(error_of([&] {
          limits.add("merchant", Dimension{"m1"}, {Period::day}, 1, 10, old.time);
        }).code() == errc::window_closed);

  LimitCounterOptions strict = options(15min);
  strict.max_future_skew = 5min;
  LimitCounter guarded(redis, limitcounter::Calendar(zone), strict);
  guarded.set_rules(*limits.rules());
  Transaction future = tx(10);
  future.time = std::chrono::system_clock::now() + 1h;
  const Error ahead = error_of([&] { guarded.consume(future); });
  CHECK(ahead.code() == errc::invalid_argument);
  CHECK_THAT(ahead.what(), Catch::Contains(future.id) && Catch::Contains("future"));
  CHECK(snapshot().empty());
  Transaction soon = tx(10);
  soon.time = std::chrono::system_clock::now() + 1min;
  CHECK(guarded.consume(soon).allowed());
}

TEST_CASE_METHOD(LimitsFixture, "refunds go back to the windows they came from",
                 "[limits][redis][refund]") {
  limits.set_rules(RuleSet()
                       .add(Rule("day").where("merchant").per(Period::day).max_amount(100000))
                       .add(Rule("month").where("merchant").per(Period::month).max_amount(100000)));
  at = next_year_local(11, 30, 23h);
  const Transaction november = tx(700);
  REQUIRE(limits.consume(november).allowed());
  at = next_year_local(12, 1, 10h);
  REQUIRE(limits.consume(tx(50)).allowed());

  // a refund on Dec 1 of the Nov 30 payment
  auto result = limits.refund(november.id, 200, "r1");
  CHECK(result.refunded_now == 200);
  CHECK(used("merchant", Dimension{"m1"}, Period::day, november.time) == Usage{1, 500});
  CHECK(used("merchant", Dimension{"m1"}, Period::month, november.time) == Usage{1, 500});
  CHECK(used("merchant", Dimension{"m1"}, Period::month, at) == Usage{1, 50});
  const RefundResult again = limits.refund(november.id, 200, "r1"); // a retry: once
  CHECK(again.replayed);
  CHECK(again.refunded_now == 200);
  CHECK(again.refunded_total == 200);
  CHECK(used("merchant", Dimension{"m1"}, Period::day, november.time) == Usage{1, 500});

  CHECK_THROWS_MATCHES(limits.refund(november.id, 501, "r2"), Error,
                       Catch::Predicate<Error>([](const Error& e) {
                         return e.code() == errc::invalid_argument &&
                                std::string(e.what()).find("500") != std::string::npos;
                       }));
  result = limits.refund(november.id);
  CHECK(result.refunded_now == 500);
  CHECK(result.refunded_total == 700);
  CHECK(used("merchant", Dimension{"m1"}, Period::day, november.time) == Usage{0, 0});
  const RefundResult full_again = limits.refund(november.id); // a retry of the full refund
  CHECK(full_again.replayed);
  CHECK(full_again.refunded_now == 500);
  CHECK(full_again.refunded_total == 700);
  CHECK(used("merchant", Dimension{"m1"}, Period::month, november.time) == Usage{0, 0});
  CHECK(used("merchant", Dimension{"m1"}, Period::month, at) == Usage{1, 50});

  CHECK_THROWS_MATCHES(
      limits.refund("never-seen"), Error,
      Catch::Predicate<Error>([](const Error& e) { return e.code() == errc::not_found; }));
  CHECK_THROWS_AS(limits.refund(november.id, 5), Error); // partial needs a refund id
}

TEST_CASE_METHOD(LimitsFixture,
                 "a refund id is bound to its amount, and none meets the full refund",
                 "[limits][redis][refund]") {
  limits.set_rules(
      RuleSet().add(Rule("day").where("merchant").per(Period::day).max_amount(100000)));
  const Transaction payment = tx(700);
  REQUIRE(limits.consume(payment).allowed());

  // a partial refund whose id is the word the full refund once used internally
  CHECK(limits.refund(payment.id, 100, "full").refunded_now == 100);
  const RefundResult rest = limits.refund(payment.id);
  CHECK_FALSE(rest.replayed);
  CHECK(rest.refunded_now == 600);
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{0, 0});

  const Transaction other = tx(700);
  REQUIRE(limits.consume(other).allowed());
  REQUIRE(limits.refund(other.id, 100, "r1").refunded_now == 100);
  const Error reused = error_of([&] { limits.refund(other.id, 300, "r1"); });
  CHECK(reused.code() == errc::conflict);
  CHECK_THAT(reused.what(),
             Catch::Contains("r1") && Catch::Contains("100") && Catch::Contains("300"));
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{1, 600});
}

TEST_CASE_METHOD(LimitsFixture, "refunds never drive a counter below zero",
                 "[limits][redis][refund]") {
  limits.set_rules(
      RuleSet().add(Rule("day").where("merchant").per(Period::day).max_amount(100000)));
  const Transaction paid = tx(300);
  REQUIRE(limits.consume(paid).allowed());
  // someone reset the counter by hand
  redis.command(
      {"HSET",
       limits.keys().window("merchant", Period::day, limits.calendar().window(Period::day, at).id),
       "m1", "0:100"});
  limits.refund(paid.id);
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{0, 0});
}

TEST_CASE_METHOD(ShortReservations, "reservations hold, confirm in part, cancel and expire",
                 "[limits][redis][reserve]") {
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_amount(1000)));
  const Transaction auth = tx(800);
  REQUIRE(limits.reserve(auth).allowed());
  CHECK_FALSE(limits.consume(tx(300)).allowed()); // the hold counts against the limit

  auto confirmed = limits.confirm(auth.id, 500);
  CHECK(confirmed.amount == 500);
  CHECK(confirmed.released == 300);
  CHECK(limits.confirm(auth.id, 500).replayed);
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{1, 500});
  CHECK(limits.consume(tx(300)).allowed());

  // reserve -> cancel -> cancel
  const Transaction second = tx(100);
  REQUIRE(limits.reserve(second).allowed());
  CHECK(outcome(limits.cancel(second.id)) == std::pair(CancelResult::Status::cancelled, false));
  CHECK(outcome(limits.cancel(second.id)) == std::pair(CancelResult::Status::cancelled, true));
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{2, 800});
  CHECK_THROWS_AS(limits.confirm(second.id), Error);

  // cancel(unknown) first: a late reserve of that id is refused and holds nothing
  CHECK(outcome(limits.cancel("late-1")) ==
        std::pair(CancelResult::Status::recorded_unknown, false));
  Transaction late = tx(10);
  late.id = "late-1";
  CHECK(limits.reserve(late).verdict == Decision::Verdict::cancelled);
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{2, 800});

  // an unconfirmed reservation expires and its hold is released
  const Transaction forgotten = tx(200);
  REQUIRE(limits.reserve(forgotten).allowed());
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{3, 1000});
  std::this_thread::sleep_for(400ms);
  CHECK(limits.consume(tx(150)).allowed()); // sweeps the expired hold first
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{3, 950});
  CHECK_THROWS_MATCHES(
      limits.confirm(forgotten.id), Error,
      Catch::Predicate<Error>([](const Error& e) { return e.code() == errc::conflict; }));
  CHECK_THROWS_AS(limits.cancel("{bad}"), Error);
}

TEST_CASE_METHOD(ShortReservations,
                 "an expired hold is released when it would deny a consume, and never denies",
                 "[limits][redis][reserve]") {
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_amount(1000)));
  const Transaction auth = tx(600);
  REQUIRE(limits.reserve(auth).allowed());
  std::this_thread::sleep_for(400ms);
  // room without it: the consume does not sweep, so the expired hold is still counted
  const Decision small = limits.consume(tx(100));
  CHECK(small.allowed());
  CHECK(small.rules.at(0).used == Usage{2, 700});
  // no room with it: released first, then decided again
  const Transaction big = tx(400);
  const Decision large = limits.consume(big);
  CHECK(large.allowed());
  CHECK(large.rules.at(0).used == Usage{2, 500});
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{2, 500});
  CHECK_THROWS_MATCHES(limits.confirm(auth.id), Error, Catch::Predicate<Error>([](const Error& e) {
                         return e.code() == errc::conflict;
                       }));
  // a replay of the consume that released it returns its first decision
  const Decision again = limits.consume(big);
  CHECK(again.replayed);
  if (limitcounter::testing::on_cluster()) {
    CHECK(again.rules.empty()); // (docs: Decision::rules)
  } else {
    CHECK(again.rules.at(0).used == Usage{2, 500});
  }
}

TEST_CASE_METHOD(ShortReservations, "a denied reservation's record shows no hold",
                 "[limits][redis][reserve]") {
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_amount(1000)));
  const Transaction big = tx(2000);
  REQUIRE_FALSE(limits.reserve(big).allowed());
  const auto record = limits.transaction_record(big.id, {});
  REQUIRE(record);
  CHECK(record->state == TransactionState::denied);
  CHECK_FALSE(record->hold_expires);
}

// A consume that needs the room releases an expired hold from its hold set and leaves the
// reservation's record as it was: the record reads as expired, holding nothing, and a cancel or
// confirm of it gives nothing back again.
TEST_CASE_METHOD(ShortReservations,
                 "a reservation whose expired hold a consume released reads as expired",
                 "[limits][redis][reserve][standalone]") {
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_amount(1000)));
  const Transaction auth = tx(600);
  REQUIRE(limits.reserve(auth).allowed());
  std::this_thread::sleep_for(400ms);
  REQUIRE(limits.consume(tx(500)).allowed()); // releases the expired hold first
  REQUIRE(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{1, 500});
  const auto record = limits.transaction_record(auth.id, {});
  REQUIRE(record);
  CHECK(record->state == TransactionState::expired);
  CHECK_FALSE(record->hold_expires);
  CHECK(outcome(limits.cancel(auth.id)) == std::pair(CancelResult::Status::expired, false));
  CHECK(outcome(limits.cancel(auth.id)) == std::pair(CancelResult::Status::expired, false));
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{1, 500});
}

// A reservation holds each window it moved through that window's own hold set: a consume under
// fewer windows releases the expired hold in its windows only (touching no key it did not
// declare), and the windows it does not use keep theirs until the reservation ends, given back
// once.
TEST_CASE_METHOD(ShortReservations,
                 "an expired hold is released window by window, each given back once",
                 "[limits][redis][reserve]") {
  const Rule day = Rule("day").where("merchant").per(Period::day).max_amount(1000);
  limits.set_rules(
      RuleSet().add(day).add(Rule("month").where("merchant").per(Period::month).max_amount(5000)));
  const Transaction auth = tx(600);
  REQUIRE(limits.reserve(auth).allowed());
  std::this_thread::sleep_for(400ms);
  limits.set_rules(RuleSet().add(day));
  // no room in the day beside the expired hold: the day's hold is released, then decided again
  REQUIRE(limits.consume(tx(500)).allowed());
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{1, 500});
  CHECK(used("merchant", Dimension{"m1"}, Period::month, at) == Usage{1, 600}); // still held
  // a cancel after the hold ran out finds it expired, gives back what it still holds (the
  // month), and nothing twice
  CHECK(outcome(limits.cancel(auth.id)) == std::pair(CancelResult::Status::expired, false));
  CHECK(outcome(limits.cancel(auth.id)) == std::pair(CancelResult::Status::expired, false));
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{1, 500});
  CHECK(used("merchant", Dimension{"m1"}, Period::month, at) == Usage{});
}

// A confirm that reaches Redis after a sweep released one window's part of an expired hold
// (sent before the hold ran out, its first send lost and resent with the same `now`; or a host
// whose clock is behind the sweeper's) finds the hold expired: recorded so, the rest given back.
// It used to confirm it, counting in every window while the swept one no longer counted it, and
// a refund then took that window's part out a second time, from other transactions' usage.
TEST_CASE_METHOD(ShortReservations,
                 "a confirm after a sweep released part of the hold finds it expired",
                 "[limits][redis][reserve][standalone]") {
  const Rule day = Rule("day").where("merchant").per(Period::day).max_amount(1000);
  limits.set_rules(
      RuleSet().add(day).add(Rule("month").where("merchant").per(Period::month).max_amount(5000)));
  const Transaction auth = tx(600);
  REQUIRE(limits.reserve(auth).allowed());
  const TimePoint confirm_sent = Clock::now(); // before the hold runs out
  std::this_thread::sleep_for(400ms);
  limits.set_rules(RuleSet().add(day));
  REQUIRE(limits.consume(tx(500)).allowed()); // releases the day's part of the expired hold
  REQUIRE(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{1, 500});
  REQUIRE(used("merchant", Dimension{"m1"}, Period::month, at) == Usage{1, 600});
  const std::vector<std::string> confirm{
      "confirm", "-1", std::to_string(limitcounter::detail::unix_millis(confirm_sent))};
  const Reply reply = limitcounter::detail::eval_declaring(
      redis, {&limitcounter::scripts::limit, {limits.keys().transaction(auth.id)}, confirm});
  CHECK(reply.at(0).as_string() == "expired");
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{1, 500});
  CHECK(used("merchant", Dimension{"m1"}, Period::month, at) == Usage{});
  const auto record = limits.transaction_record(auth.id, {});
  REQUIRE(record);
  CHECK(record->state == TransactionState::expired);
  // nothing to refund, nothing given back twice
  CHECK(error_of([&] { limits.refund(auth.id); }).code() == errc::conflict);
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{1, 500});
  CHECK(used("merchant", Dimension{"m1"}, Period::month, at) == Usage{});
}

// A reservation an earlier version made kept one member per counter shape, in
// "<prefix>{<shape>}:holds", naming its counter set and fields; its counter set lists those hold
// sets. Such a reservation, still open at an upgrade, is still cancelled once.
// Confirm, cancel and another reservation's sweep of expired holds, all at the moment the hold
// runs out: the reservation ends once, as confirmed (its final amount counted) or as cancelled
// or expired (its hold given back once), and every counter (a share each on a cluster) agrees.
TEST_CASE_METHOD(ShortReservationsWithGrace,
                 "confirm and cancel racing a sweep at a hold's expiry: the reservation ends once",
                 "[limits][redis][reserve]") {
  limits.set_rules(
      RuleSet()
          .add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(1000))
          .add(Rule("dept-day").where("dept").per(Period::day).max_amount(1000)));
  Usage expected{};
  for (int round = 0; round < 10; ++round) {
    const Transaction held = tx(100);
    const Transaction other = tx(100);
    REQUIRE(limits.reserve(held).allowed());
    // from 40 ms before the hold's end to 50 ms after it
    std::this_thread::sleep_for(std::chrono::milliseconds{260 + 10 * round});
    std::atomic<int> other_errors{0}; // Catch's assertions are not thread-safe: counted here
    const auto attempt = [&](std::function<void()> call) {
      return [call, &other_errors] {
        try {
          call();
        } catch (const Error& e) {
          other_errors += e.code() == errc::conflict ? 0 : 1; // confirm of an expired hold
        }
      };
    };
    std::vector<std::thread> threads;
    for (auto call :
         {attempt([&] { limits.confirm(held.id, 60); }), attempt([&] { limits.cancel(held.id); }),
          attempt([&] { limits.reserve(other); })}) {
      threads.emplace_back(call);
    }
    for (auto& thread : threads) {
      thread.join();
    }
    CHECK(other_errors == 0);
    limits.cancel(other.id); // (its hold given back, or recorded unknown)
    const auto record = limits.transaction_record(held.id);
    REQUIRE(record);
    INFO("round " << round << ": " << to_string(record->state));
    if (record->state == TransactionState::confirmed) {
      expected = {expected.count + 1, expected.amount + 60};
    } else {
      CHECK((record->state == TransactionState::cancelled ||
             record->state == TransactionState::expired));
    }
    CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == expected);
    CHECK(used("dept", Dimension{"cmb"}, Period::day, at) == expected);
  }
}

TEST_CASE_METHOD(LimitsFixture, "a reservation held in a per-shape hold set is cancelled once",
                 "[limits][redis][reserve][standalone]") {
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_amount(1000)));
  const Transaction auth = tx(600);
  REQUIRE(limits.reserve(auth).allowed());
  // rewrite what the reserve left into what the earlier version left
  const std::string record = limits.keys().transaction(auth.id);
  std::istringstream record_text(redis.command({"GET", record}).as_string());
  const std::vector<std::string> words{std::istream_iterator<std::string>(record_text), {}};
  REQUIRE(words.size() == 5); // r <fingerprint> <amount> <counter set> <fields>
  const std::string set_key = prefix + "cs:" + words[3];
  const std::string text = redis.command({"GET", set_key}).as_string();
  const std::size_t first = text.find('\n') + 1; // (after "1 <expiry>")
  const std::string window = text.substr(first, text.find(' ', first) - first);
  const std::string hold = CounterKeys::window_holds(window);
  REQUIRE(text == text.substr(0, first) + window + " 1\n" + hold);
  const std::string score = redis.command({"ZSCORE", hold, record + " 600 m1"}).as_string();
  const std::string shape_hold = prefix + "{merchant}:holds";
  redis.command({"SET", set_key, "1\n" + window + " 1\n" + shape_hold, "KEEPTTL"});
  redis.command({"DEL", hold});
  redis.command({"ZADD", shape_hold, score, record + " 600 " + words[3] + " m1"});
  REQUIRE(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{1, 600});

  CHECK(outcome(limits.cancel(auth.id)) == std::pair(CancelResult::Status::cancelled, false));
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{});
  CHECK(redis.command({"ZCARD", shape_hold}).as_integer() == 0);
  CHECK(outcome(limits.cancel(auth.id)) == std::pair(CancelResult::Status::cancelled, true));
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{});
}

TEST_CASE_METHOD(LimitsFixture, "check decides without consuming", "[limits][redis]") {
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_count(1)));
  const Decision peek = limits.check(tx(5));
  CHECK(peek.allowed());
  CHECK(peek.dry_run);
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{});
  CHECK(limits.consume(tx(5)).allowed());
  CHECK_FALSE(limits.check(tx(5)).allowed());
}

TEST_CASE_METHOD(LimitsFixture, "window edges and TTLs", "[limits][redis]") {
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_count(1)));
  const TimePoint midnight = next_year_local(3, 1, 0h);
  at = midnight - 1ms;
  CHECK(limits.consume(tx(1)).allowed());
  at = midnight;
  CHECK(limits.consume(tx(1)).allowed()); // another day: the limit of 1 applies afresh
  for (const auto& key : limitcounter::testing::keys_matching(prefix + "*")) {
    INFO(key);
    CHECK(redis.command({"PTTL", key}).as_integer() > 0);
  }
}

TEST_CASE_METHOD(LimitsFixture, "totals near 2^53 are refused, not rounded", "[limits][redis]") {
  limits.set_rules(RuleSet().add(
      Rule("day").where("merchant").per(Period::day).max_amount(limitcounter::max_exact_integer)));
  CHECK(limits.consume(tx(limitcounter::max_exact_integer - 1)).allowed());
  CHECK(limits.consume(tx(1)).allowed());
  CHECK_FALSE(limits.consume(tx(1)).allowed());
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) ==
        Usage{2, limitcounter::max_exact_integer});
  CHECK_THROWS_MATCHES(
      limits.consume(tx(std::int64_t{1} << 53)), Error,
      Catch::Predicate<Error>([](const Error& e) { return e.code() == errc::precision_overflow; }));
}

// limit.lua reads and checks every counter set of a call before it writes anything: a batch
// whose second transaction's counter set key is not a string fails with nothing written, not
// even the first transaction, which a retry then decides. (Standalone: on a cluster the two
// records are in different slots, so never in one call.)
TEST_CASE_METHOD(LimitsFixture, "a batch failing at its second counter set has written nothing",
                 "[limits][redis][batch][standalone]") {
  const Rule day = Rule("day").where("merchant").per(Period::day).max_count(50);
  limits.set_rules(RuleSet().add(day));
  const Transaction first = tx(10);
  Transaction second = tx(20);
  second.time = at + 24h; // another window: another counter set
  const auto context = limitcounter::testing::decide_context(limits, limitcounter::Clock::now());
  const std::string broken_set = limitcounter::detail::build_decide(limitcounter::LimitOp::consume,
                                                                    second, {}, {&day}, context)
                                     .keys.at(1);
  REQUIRE(redis.command({"HSET", broken_set, "not", "a string"}).as_integer() == 1);

  const auto results = limits.consume_many({first, second});
  REQUIRE(results.size() == 2);
  CHECK(std::holds_alternative<Error>(results[0]));
  CHECK(std::holds_alternative<Error>(results[1]));
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{});
  const Decision again = limits.consume(first);
  CHECK(again.allowed());
  CHECK_FALSE(again.replayed);
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{1, 10});
}

TEST_CASE_METHOD(LimitsFixture, "consume_many pipelines independent decisions",
                 "[limits][redis][batch]") {
  limits.set_rules(RuleSet()
                       .add(Rule("day").where("merchant").per(Period::day).max_count(50))
                       .add(Rule("single").where("merchant").per_transaction().max_amount(1000)));
  std::vector<Transaction> batch;
  for (int i = 0; i < 64; ++i) {
    batch.push_back(tx(i == 3 ? 5000 : 10));
  }
  batch.push_back(batch[0]); // a retry inside the batch
  Transaction conflicting = batch[1];
  conflicting.amount = 11;
  batch.push_back(conflicting);

  const auto results = limits.consume_many(batch);
  REQUIRE(results.size() == batch.size());
  int allowed = 0;
  int denied_by_day = 0;
  for (std::size_t i = 0; i < 64; ++i) {
    const auto* decision = std::get_if<Decision>(&results[i]);
    REQUIRE(decision);
    allowed += decision->allowed() ? 1 : 0;
    denied_by_day += !decision->allowed() && decision->denial->rule == "day" ? 1 : 0;
  }
  CHECK(std::get<Decision>(results[3]).denial->rule == "single");
  CHECK(allowed == 50);
  CHECK(denied_by_day == 13);
  CHECK(std::get<Decision>(results[64]).replayed);
  const auto* error = std::get_if<Error>(&results[65]);
  REQUIRE(error);
  CHECK(error->code() == errc::conflict);
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{50, 500});

  // bad input anywhere refuses the whole batch before anything is sent
  std::vector<Transaction> bad{tx(1), tx(-1)};
  CHECK_THROWS_AS(limits.consume_many(bad), Error);
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{50, 500});
}

// Transactions that only per-transaction rules match have no counter to share: each has its own
// record (on a cluster in the slot of its own id), and a batch decides each on its own.
TEST_CASE_METHOD(LimitsFixture,
                 "consumes under per-transaction rules only are decided on their own records",
                 "[limits][redis][batch]") {
  limits.set_rules(
      RuleSet().add(Rule("single").where("merchant").per_transaction().max_amount(1000)));
  std::vector<Transaction> batch;
  for (int i = 0; i < 6; ++i) {
    batch.push_back(tx(i == 2 ? 5000 : 100 + i));
  }
  const auto results = limits.consume_many(batch);
  REQUIRE(results.size() == batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto* decision = std::get_if<Decision>(&results[i]);
    if (const auto* error = std::get_if<Error>(&results[i])) {
      FAIL_CHECK(error->what());
    }
    REQUIRE(decision);
    CHECK(decision->allowed() == (i != 2));
    CHECK_FALSE(decision->replayed);
  }
  CHECK(std::get<Decision>(results[2]).denial->metric == Metric::single_amount);
  const auto again = limits.consume_many(batch);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto* decision = std::get_if<Decision>(&again[i]);
    REQUIRE(decision);
    CHECK(decision->replayed);
    CHECK(decision->allowed() == (i != 2));
  }
  // and one by one, each on its own record
  CHECK(limits.consume(tx(10)).allowed());
  CHECK(limits.consume(tx(20)).allowed());
}

TEST_CASE_METHOD(LimitsFixture, "consume_many decides transactions with values of every length",
                 "[limits][redis][batch]") {
  // A batch sends its transactions' values as one MessagePack array of strings: a record's fields
  // of every length class (up to 31 characters, up to 255, longer) arrive whole.
  limits.set_rules(
      RuleSet()
          .add(Rule("day").where("merchant").per(Period::day).max_count(2))
          .add(Rule("dept").where("dept").per(Period::day).max_amount(1000))
          .add(Rule("pair").where("merchant").where("dept").per(Period::day).max_count(10)));
  const std::string long_merchant(40, 'm'); // fields: 40 + 1 + 3 + 1 + the pair's
  const std::string longest_merchant(64, 'n');
  const std::string longest_dept(64, 'd'); // fields: 64 + 1 + 64 + 1 + the pair's (129 or more)
  std::vector<Transaction> batch{
      tx(10), tx(20, long_merchant), tx(30, longest_merchant, longest_dept),
      tx(40, longest_merchant, longest_dept), tx(50, longest_merchant, longest_dept)};
  const auto results = limits.consume_many(batch);
  REQUIRE(results.size() == 5);
  for (std::size_t i = 0; i < 4; ++i) {
    REQUIRE(std::holds_alternative<Decision>(results[i]));
    CHECK(std::get<Decision>(results[i]).allowed());
  }
  REQUIRE(std::holds_alternative<Decision>(results[4]));
  CHECK(std::get<Decision>(results[4]).denial->rule == "day");
  CHECK(used("merchant", Dimension{"m1"}, Period::day, at) == Usage{1, 10});
  CHECK(used("merchant", Dimension{long_merchant}, Period::day, at) == Usage{1, 20});
  CHECK(used("merchant", Dimension{longest_merchant}, Period::day, at) == Usage{2, 70});
  CHECK(used("dept", Dimension{longest_dept}, Period::day, at) == Usage{2, 70});
  CHECK(used("dept", Dimension{"cmb"}, Period::day, at) == Usage{2, 30});
  if (!limitcounter::testing::on_cluster()) {
    // (the longest record's fields took a 16-bit length: more than 255 characters)
    const std::string record =
        redis.command({"GET", prefix + "tx:{" + batch[2].id + "}"}).as_string();
    const std::size_t fields_at = record.find(' ' + longest_merchant);
    REQUIRE(fields_at != std::string::npos);
    CHECK(record.size() - fields_at > 256);
  }
  // a retry of the batch replays every decision
  const auto again = limits.consume_many(batch);
  for (std::size_t i = 0; i < 5; ++i) {
    REQUIRE(std::holds_alternative<Decision>(again[i]));
    CHECK(std::get<Decision>(again[i]).replayed);
    CHECK(std::get<Decision>(again[i]).allowed() == (i < 4));
  }
}
