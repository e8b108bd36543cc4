#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include <date/date.h>
#include <date/tz.h>

#include <limitcounter/limit_counter.hpp>

#include "support/redis_server.hpp"
#include "support/topology.hpp"

using namespace std::chrono_literals;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::LimitCounter;
using limitcounter::LimitCounterOptions;
using limitcounter::Redis;
using limitcounter::TimePoint;
using limitcounter::testing::test_options;
using limitcounter::testing::unique_prefix;

namespace {

struct CapsFixture {
  Redis redis{test_options()};
  std::string prefix = unique_prefix() + "sms:";
  LimitCounter limits{redis, limitcounter::Calendar("Asia/Shanghai"), options()};

  LimitCounterOptions options() const {
    LimitCounterOptions o;
    o.key_prefix = prefix;
    return o;
  }
};

TimePoint next_year_noon() {
  const auto today =
      date::year_month_day{date::floor<date::days>(std::chrono::system_clock::now())};
  const auto day = date::local_days{date::year{int(today.year()) + 1} / 5 / 20};
  return date::make_zoned("Asia/Shanghai", day + 12h).get_sys_time();
}

} // namespace

TEST_CASE_METHOD(CapsFixture, "a daily cap allows N, refuses N+1 without counting, resets next day",
                 "[caps][redis]") {
  const TimePoint today = next_year_noon();
  for (int i = 1; i <= 5; ++i) {
    const auto taken = limits.take_daily_cap("sms", "acct-1", 5, today);
    CHECK(taken.allowed());
    CHECK(taken.used == i);
    CHECK(taken.remaining == 5 - i);
  }
  for (int i = 0; i < 3; ++i) {
    const auto refused = limits.take_daily_cap("sms", "acct-1", 5, today);
    CHECK_FALSE(refused.allowed());
    CHECK(refused.used == 5); // refused attempts are not counted
    CHECK(refused.remaining == 0);
  }
  CHECK(limits.take_daily_cap("sms", "acct-2", 5, today).used == 1); // another subject
  const auto tomorrow = limits.take_daily_cap("sms", "acct-1", 5, today + 24h);
  CHECK(tomorrow.allowed());
  CHECK(tomorrow.used == 1);
  CHECK(tomorrow.window.id != limits.calendar().window(limitcounter::Period::day, today).id);

  const auto key = limits.keys().cap_window("sms", tomorrow.window.id);
  CHECK(redis.command({"PEXPIRETIME", key}).as_integer() ==
        std::chrono::duration_cast<std::chrono::milliseconds>(
            (tomorrow.window.end + 1h).time_since_epoch())
            .count());
  CHECK_THROWS_MATCHES(limits.take_daily_cap("sms", "acct 1", 5, today), Error,
                       Catch::Predicate<Error>([](const Error& e) {
                         return e.code() == errc::invalid_argument &&
                                std::string(e.what()).find("acct 1") != std::string::npos;
                       }));
  CHECK_THROWS_AS(limits.take_daily_cap("sms", "acct-1", -1, today), Error);
  CHECK_THROWS_AS(limits.take_daily_cap("sms", "acct-1", 5, today, 0), Error);
}

TEST_CASE_METHOD(CapsFixture, "a daily cap holds under concurrency", "[caps][redis][concurrency]") {
  const TimePoint today = next_year_noon();
  std::atomic<int> allowed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        allowed += limits.take_daily_cap("sms", "hot", 100, today).allowed() ? 1 : 0;
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  CHECK(allowed == 100);
  CHECK(limits.take_daily_cap("sms", "hot", 100, today).used == 100);
}

TEST_CASE_METHOD(CapsFixture, "a sliding window admits exactly max of 1000 at once",
                 "[sliding][redis][concurrency]") {
  std::atomic<int> allowed{0};
  std::vector<std::thread> threads;
  const TimePoint now = limitcounter::Clock::now();
  for (int t = 0; t < 20; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        allowed += limits.hit_sliding_window("pay", "m1", 100, 60s, now).allowed() ? 1 : 0;
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  CHECK(allowed == 100);
  const auto key = limits.keys().sliding("pay", "m1");
  CHECK(redis.command({"ZCARD", key}).as_integer() == 100); // refused requests left no trace
  CHECK(redis.command({"PTTL", key}).as_integer() > 0);
}

TEST_CASE_METHOD(CapsFixture, "a sliding window slides", "[sliding][redis]") {
  const TimePoint t0 = limitcounter::Clock::now();
  // virtual times close to now: the set's real TTL (the window length) outlives the test
  CHECK(limits.hit_sliding_window("pay", "m2", 2, 5000ms, t0).allowed());
  CHECK(limits.hit_sliding_window("pay", "m2", 2, 5000ms, t0 + 2000ms).allowed());
  const auto refused = limits.hit_sliding_window("pay", "m2", 2, 5000ms, t0 + 4000ms);
  CHECK_FALSE(refused.allowed());
  CHECK(refused.retry_at == std::chrono::time_point_cast<std::chrono::milliseconds>(t0) + 5000ms);
  // the first request leaves the window at t0 + 5000 ms
  CHECK(limits.hit_sliding_window("pay", "m2", 2, 5000ms, t0 + 5001ms).allowed());
  CHECK_FALSE(limits.hit_sliding_window("pay", "m2", 2, 5000ms, t0 + 5002ms).allowed());
  CHECK(limits.hit_sliding_window("pay", "m2", 2, 5000ms, t0 + 7001ms).allowed());
  CHECK_THROWS_AS(limits.hit_sliding_window("pay", "m2", 0, 1000ms, t0), Error);
  CHECK_THROWS_AS(limits.hit_sliding_window("pay", "m2", 1, 0ms, t0), Error);
  CHECK_THROWS_AS(limits.hit_sliding_window("p{x}", "m2", 1, 10ms, t0), Error);
}

TEST_CASE_METHOD(CapsFixture, "take_daily_cap_many: one pipeline, one result per take, in order",
                 "[caps][redis][batch]") {
  const TimePoint today = next_year_noon();
  std::vector<limitcounter::CapRequest> requests;
  for (int i = 0; i < 7; ++i) {
    requests.push_back({"sms", "batch-a", 5, today, 1});
  }
  requests.push_back({"sms", "batch-b", 5, today, 3});
  requests.push_back({"sms", "batch-b", 5, today + 24h, 5}); // the next day has its own cap
  const auto results = limits.take_daily_cap_many(requests);
  REQUIRE(results.size() == requests.size());
  for (int i = 0; i < 7; ++i) {
    const auto& decision = std::get<limitcounter::CapDecision>(results[static_cast<size_t>(i)]);
    CHECK(decision.allowed() == (i < 5)); // takes of one subject apply in the order given
    CHECK(decision.used == std::min(i + 1, 5));
  }
  const auto& b = std::get<limitcounter::CapDecision>(results[7]);
  CHECK((b.allowed() && b.used == 3 && b.remaining == 2));
  const auto& next_day = std::get<limitcounter::CapDecision>(results[8]);
  CHECK((next_day.allowed() && next_day.used == 5));
  CHECK(next_day.window.id != b.window.id);
  CHECK(limits.take_daily_cap("sms", "batch-b", 5, today).used == 4); // the batch counted once

  // bad input anywhere: an error naming it, and nothing sent
  requests = {{"sms", "batch-c", 5, today, 1}, {"sms", "bad subject", 5, today, 1}};
  CHECK_THROWS_WITH(limits.take_daily_cap_many(requests), Catch::Contains("bad subject"));
  CHECK(limits.take_daily_cap("sms", "batch-c", 5, today).used == 1);
  CHECK(limits.take_daily_cap_many({}).empty());
}

TEST_CASE_METHOD(CapsFixture, "hit_sliding_window_many: one pipeline, one result per hit, in order",
                 "[sliding][redis][batch]") {
  const TimePoint t0 = limitcounter::Clock::now();
  std::vector<limitcounter::SlidingRequest> requests;
  for (int i = 0; i < 5; ++i) {
    requests.push_back({"pay", "batch-m", 3, 5000ms, t0 + std::chrono::milliseconds(i)});
  }
  requests.push_back({"pay", "batch-n", 1, 5000ms, t0});
  const auto results = limits.hit_sliding_window_many(requests);
  REQUIRE(results.size() == requests.size());
  for (int i = 0; i < 5; ++i) {
    const auto& decision = std::get<limitcounter::SlidingDecision>(results[static_cast<size_t>(i)]);
    CHECK(decision.allowed() == (i < 3));
    CHECK(decision.used == std::min(i + 1, 3));
  }
  const auto& refused = std::get<limitcounter::SlidingDecision>(results[4]);
  CHECK(refused.retry_at == std::chrono::time_point_cast<std::chrono::milliseconds>(t0) + 5000ms);
  CHECK(std::get<limitcounter::SlidingDecision>(results[5]).allowed());
  CHECK(redis.command({"ZCARD", limits.keys().sliding("pay", "batch-m")}).as_integer() == 3);

  requests = {{"pay", "batch-o", 3, 5000ms, t0}, {"pay", "batch-o", 3, 0ms, t0}};
  CHECK_THROWS_WITH(limits.hit_sliding_window_many(requests), Catch::Contains("0 ms"));
  CHECK(redis.command({"EXISTS", limits.keys().sliding("pay", "batch-o")}).as_integer() == 0);
}

TEST_CASE_METHOD(CapsFixture, "a take of n with fewer than n left is refused and counts nothing",
                 "[caps][redis]") {
  const TimePoint at = next_year_noon();
  REQUIRE(limits.take_daily_cap("sms", "few-left", 10, at, 8).allowed());
  const auto refused = limits.take_daily_cap("sms", "few-left", 10, at, 3);
  CHECK_FALSE(refused.allowed());
  CHECK(refused.used == 8);
  CHECK(refused.remaining == 2);
  // exactly what is left still fits, then nothing
  const auto rest = limits.take_daily_cap("sms", "few-left", 10, at, 2);
  CHECK(rest.allowed());
  CHECK(rest.used == 10);
  CHECK_FALSE(limits.take_daily_cap("sms", "few-left", 10, at, 1).allowed());
}

TEST_CASE_METHOD(CapsFixture, "a sliding-window hit at a refusal's retry_at is admitted",
                 "[sliding][redis]") {
  const TimePoint t0 =
      std::chrono::time_point_cast<std::chrono::milliseconds>(limitcounter::Clock::now());
  REQUIRE(limits.hit_sliding_window("pay", "at-retry", 1, 1000ms, t0).allowed());
  const auto refused = limits.hit_sliding_window("pay", "at-retry", 1, 1000ms, t0 + 400ms);
  REQUIRE_FALSE(refused.allowed());
  REQUIRE(refused.retry_at == t0 + 1000ms);
  // one millisecond before, the first hit is still in the window; at retry_at it has left
  CHECK_FALSE(
      limits.hit_sliding_window("pay", "at-retry", 1, 1000ms, refused.retry_at - 1ms).allowed());
  CHECK(limits.hit_sliding_window("pay", "at-retry", 1, 1000ms, refused.retry_at).allowed());
}
