#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include <date/date.h>
#include <date/tz.h>

#include <limitcounter/limit_counter.hpp>

#include "support/redis_server.hpp"
#include "support/topology.hpp"

using namespace std::chrono_literals;
using limitcounter::Calendar;
using limitcounter::Dimension;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::LimitCounter;
using limitcounter::LimitCounterOptions;
using limitcounter::Period;
using limitcounter::Redis;
using limitcounter::TimePoint;
using limitcounter::Usage;
using limitcounter::testing::test_options;
using limitcounter::testing::unique_prefix;

namespace {

// Local midnight starting `day` in `zone`, as an instant.
TimePoint local_midnight(const char* zone, date::year_month_day day) {
  return date::make_zoned(zone, date::local_days{day}).get_sys_time();
}

// Next year's date for `month`/`day`: always in the future, so keys get a real TTL.
date::year_month_day next_year(unsigned month, unsigned day) {
  const auto today =
      date::year_month_day{date::floor<date::days>(std::chrono::system_clock::now())};
  return date::year{int(today.year()) + 1} / date::month{month} / date::day{day};
}

struct Fixture {
  Redis redis{test_options()};
  std::string prefix = unique_prefix() + "trans:limit:";
  LimitCounter counter{redis, Calendar("Asia/Shanghai"), make_options()};

  LimitCounterOptions make_options() const {
    LimitCounterOptions options;
    options.key_prefix = prefix;
    options.window_grace = 3600s;
    return options;
  }
  // Every key this fixture's counters wrote.
  std::vector<std::string> keys() { return limitcounter::testing::keys_matching(prefix + "*"); }
};

} // namespace

TEST_CASE_METHOD(Fixture, "add counts per day and per month in one call", "[counter][redis]") {
  const Dimension cmb{"Ali", "Deduct", "cmb"};
  const TimePoint at = local_midnight("Asia/Shanghai", next_year(11, 11)) + 10h;
  const std::string year = date::format("%Y", at);

  auto totals = counter.add("channel", cmb, {Period::day, Period::month}, 1, 12345, at);
  REQUIRE(totals.size() == 2);
  CHECK(totals[0].window.id == year + "1111");
  CHECK(totals[0].usage == Usage{1, 12345});
  CHECK(totals[1].window.id == year + "11");
  CHECK(totals[1].usage == Usage{1, 12345});

  counter.add("channel", cmb, {Period::day, Period::month}, 2, 100, at + 1h);
  // the next day: a new day window, the same month window
  totals = counter.add("channel", cmb, {Period::day, Period::month}, 1, 5, at + 24h);
  CHECK(totals[0].usage == Usage{1, 5});
  CHECK(totals[1].usage == Usage{4, 12450});

  CHECK(counter.usage("channel", cmb, Period::day, at) == Usage{3, 12445});
  CHECK(counter.usage("channel", cmb, Period::month, at) == Usage{4, 12450});
  CHECK(counter.usage("channel", Dimension{"Ali", "Deduct", "cib"}, Period::day, at) == Usage{});

  CHECK(keys() == std::vector<std::string>{prefix + "{channel}:day:" + year + "1111",
                                           prefix + "{channel}:day:" + year + "1112",
                                           prefix + "{channel}:month:" + year + "11"});
  // what a user sees with redis-cli HGETALL
  const auto fields = redis.command({"HGETALL", prefix + "{channel}:day:" + year + "1111"});
  CHECK(fields.at(0).as_string() == "Ali+Deduct+cmb");
  CHECK(fields.at(1).as_string() == "3:12445");
}

TEST_CASE_METHOD(Fixture, "every key expires at its window end plus the grace",
                 "[counter][redis]") {
  const TimePoint at = local_midnight("Asia/Shanghai", next_year(1, 31)) + 23h + 59min;
  // the first increment is larger than 1: the key must still get its TTL
  const auto totals = counter.add(
      "merchant", Dimension{"m1"},
      {Period::minute, Period::hour, Period::day, Period::week, Period::month, Period::year}, 5,
      500, at);
  for (const auto& window : totals) {
    INFO(to_string(window.period));
    const auto key = counter.keys().window("merchant", window.period, window.window.id);
    const auto expire_ms = redis.command({"PEXPIRETIME", key}).as_integer();
    const auto expected = std::chrono::duration_cast<std::chrono::milliseconds>(
        (window.window.end + 3600s).time_since_epoch());
    CHECK(expire_ms == expected.count());
  }
  // the month window of Jan 31 23:59 ends at Feb 1 00:00 local time, not 30 days after a write
  CHECK(totals[4].window.end == local_midnight("Asia/Shanghai", next_year(2, 1)));
}

TEST_CASE_METHOD(Fixture, "23:59:59.999 and 00:00:00.000 local count into different days",
                 "[counter][redis]") {
  const TimePoint midnight = local_midnight("Asia/Shanghai", next_year(3, 1));
  const Dimension dimension{"Wx", "Pay", "ccb"};
  const auto before = counter.add("channel", dimension, {Period::day}, 1, 1, midnight - 1ms);
  const auto after = counter.add("channel", dimension, {Period::day}, 1, 1, midnight);
  CHECK(before[0].window.id != after[0].window.id);
  CHECK(before[0].usage == Usage{1, 1});
  CHECK(after[0].usage == Usage{1, 1});
}

TEST_CASE_METHOD(Fixture, "16:30 UTC on Nov 11 counts into Shanghai's Nov 12", "[counter][redis]") {
  const auto nov11 = next_year(11, 11);
  const TimePoint at = date::sys_days{nov11} + 16h + 30min;
  const auto totals = counter.add("channel", Dimension{"Ali"}, {Period::day}, 1, 1, at);
  CHECK(totals[0].window.id == date::format("%Y", at) + "1112");
}

TEST_CASE_METHOD(Fixture, "totals never pass 2^53 - 1 and nothing is rounded", "[counter][redis]") {
  const TimePoint at = local_midnight("Asia/Shanghai", next_year(6, 1));
  const Dimension dimension{"big"};
  const std::int64_t max = limitcounter::max_exact_integer;
  counter.add("channel", dimension, {Period::day, Period::month}, 1, max - 1, at);
  CHECK(counter.add("channel", dimension, {Period::day}, 0, 1, at)[0].usage.amount == max);

  // the month window could take it, the day window cannot: neither moves
  try {
    counter.add("channel", dimension, {Period::month, Period::day}, 1, 1, at);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == errc::precision_overflow);
    CHECK_THAT(e.what(), Catch::Contains("big"));
  }
  CHECK(counter.usage("channel", dimension, Period::day, at) == Usage{1, max});
  CHECK(counter.usage("channel", dimension, Period::month, at) == Usage{1, max - 1});

  CHECK_THROWS_MATCHES(counter.add("channel", Dimension{"other"}, {Period::day}, 1, max + 1, at),
                       Error, Catch::Predicate<Error>([](const Error& e) {
                         return e.code() == errc::precision_overflow &&
                                std::string(e.what()).find("9007199254740992") != std::string::npos;
                       }));
}

TEST_CASE_METHOD(Fixture, "bad input is refused and leaves Redis untouched", "[counter][redis]") {
  const TimePoint at = local_midnight("Asia/Shanghai", next_year(7, 1));
  counter.add("channel", Dimension{"ok"}, {Period::day}, 1, 1, at);
  const auto before = keys();
  const auto value_before = counter.usage("channel", Dimension{"ok"}, Period::day, at);

  const auto expect = [&](errc code, auto&& action) {
    try {
      action();
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.code() == code);
      CHECK(e.outcome() == limitcounter::Outcome::not_sent);
    }
  };
  expect(errc::invalid_argument,
         [&] { counter.add("channel", Dimension{"ok"}, {Period::day}, -1, 0, at); });
  expect(errc::invalid_argument,
         [&] { counter.add("channel", Dimension{"ok"}, {Period::day}, 1, -5, at); });
  expect(errc::invalid_argument,
         [&] { counter.add("chan:nel", Dimension{"ok"}, {Period::day}, 1, 1, at); });
  expect(errc::invalid_argument, [&] { counter.add("channel", Dimension{"ok"}, {}, 1, 1, at); });
  expect(errc::invalid_argument, [&] {
    counter.add("channel", Dimension{"ok"}, {Period::day, Period::day}, 1, 1, at);
  });
  expect(errc::precision_overflow, [&] {
    counter.add("channel", Dimension{"ok"}, {Period::day}, 1,
                std::numeric_limits<std::int64_t>::max(), at);
  });
  // a window long past: its key would expire at once
  expect(errc::window_closed, [&] {
    counter.add("channel", Dimension{"ok"}, {Period::day}, 1, 1,
                date::sys_days{date::year{2021} / 11 / 11} + 16h + 30min);
  });
  CHECK(keys() == before);
  CHECK(counter.usage("channel", Dimension{"ok"}, Period::day, at) == value_before);
}

TEST_CASE_METHOD(Fixture, "concurrent adds from many threads are all counted", "[counter][redis]") {
  const TimePoint at = local_midnight("Asia/Shanghai", next_year(8, 8)) + 12h;
  constexpr int threads = 8;
  constexpr int adds = 200;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < adds; ++i) {
        counter.add("channel", Dimension{"Ali", "Deduct", "cmb"}, {Period::day, Period::month}, 1,
                    t + 1, at);
      }
    });
  }
  for (auto& worker : workers) {
    worker.join();
  }
  const std::int64_t amount = adds * (threads * (threads + 1) / 2);
  CHECK(counter.usage("channel", Dimension{"Ali", "Deduct", "cmb"}, Period::day, at) ==
        Usage{threads * adds, amount});
  CHECK(counter.usage("channel", Dimension{"Ali", "Deduct", "cmb"}, Period::month, at) ==
        Usage{threads * adds, amount});
}

TEST_CASE_METHOD(Fixture, "add_many pipelines many adds with one result each",
                 "[counter][redis][batch]") {
  const TimePoint at = local_midnight("Asia/Shanghai", next_year(9, 9)) + 9h;
  std::vector<limitcounter::AddRequest> requests;
  for (int i = 0; i < 64; ++i) {
    requests.push_back({"channel",
                        Dimension{"Ali", "Deduct", i % 2 ? "cmb" : "cib"},
                        {Period::day, Period::month},
                        1,
                        100,
                        at});
  }
  requests.push_back({"channel",
                      Dimension{"Ali", "Deduct", "cmb"},
                      {Period::day},
                      0,
                      limitcounter::max_exact_integer,
                      at}); // overflows on the server
  const auto results = counter.add_many(requests);
  REQUIRE(results.size() == 65);
  const auto& last_ok = std::get<std::vector<limitcounter::WindowUsage>>(results[63]);
  CHECK(last_ok[0].usage == Usage{32, 3200});
  const auto* overflow = std::get_if<Error>(&results[64]);
  REQUIRE(overflow);
  CHECK(overflow->code() == errc::precision_overflow);
  CHECK(counter.usage("channel", Dimension{"Ali", "Deduct", "cmb"}, Period::month, at) ==
        Usage{32, 3200});
}
