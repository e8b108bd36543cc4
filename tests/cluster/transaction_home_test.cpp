// Limits spread over several cluster slots under concurrency: one authoritative home record
// per transaction decides who is first, which of confirm and cancel wins, and that a refused
// operation writes nothing.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <variant>
#include <vector>

#include <limitcounter/limitcounter.hpp>

#include "redis/key_slot.hpp"
#include "support/probe.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"

using namespace limitcounter;
using testing::error_of;
using testing::shared_cluster;
using testing::unique_prefix;

namespace {

struct SpreadLimits {
  Redis redis{shared_cluster().options()};
  LimitCounter limits;

  explicit SpreadLimits(std::uint32_t buckets = 1)
      : limits{redis, Calendar("UTC"), [buckets] {
                 LimitCounterOptions options;
                 options.key_prefix = unique_prefix() + "home:";
                 options.counter_buckets = buckets;
                 return options;
               }()} {
    REQUIRE(detail::key_slot("{dept}") != detail::key_slot("{merchant}"));
    limits.set_rules(
        RuleSet()
            .add(Rule("dept-day").where("dept").per(Period::day).max_amount(1'000'000))
            .add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(1'000'000)));
  }
  static Transaction tx(const std::string& id, std::int64_t amount = 100) {
    return Transaction{id, {{"merchant", "m1"}, {"dept", "cmb"}}, amount};
  }
  Usage dept() { return limits.usage("dept", Dimension{"cmb"}, Period::day); }
  Usage merchant() { return limits.usage("merchant", Dimension{"m1"}, Period::day); }
};

// The same, run once with one bucket per counter and once with each counter spread over 64
// (every transaction then decided through its home record, even when one slot would do).
struct SpreadLimitsOverBuckets : SpreadLimits {
  SpreadLimitsOverBuckets() : SpreadLimits(GENERATE(1U, 64U)) {}
};

// Runs `calls` at once on as many threads, released together.
void race(std::vector<std::function<void()>> calls) {
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (auto& call : calls) {
    threads.emplace_back([&ready, &calls, call] {
      ++ready;
      while (ready.load() < static_cast<int>(calls.size())) {
        std::this_thread::yield();
      }
      call();
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
}

} // namespace

TEST_CASE_METHOD(SpreadLimitsOverBuckets, "16 concurrent callers of one id: exactly one is first",
                 "[cluster][limits][home]") {
  for (int round = 0; round < 15; ++round) {
    const Transaction payment = tx("race-" + std::to_string(round));
    std::atomic<int> first{0};
    std::atomic<int> allowed{0};
    std::vector<std::function<void()>> calls(16, [&] {
      const Decision decision = limits.consume(payment);
      first += decision.replayed ? 0 : 1;
      allowed += decision.allowed() ? 1 : 0;
    });
    race(calls);
    CHECK(first == 1);
    CHECK(allowed == 16);
  }
  CHECK(dept() == Usage{15, 1500});
  CHECK(merchant() == Usage{15, 1500});
}

TEST_CASE_METHOD(SpreadLimitsOverBuckets,
                 "confirm racing cancel racing refund: one wins, every share follows",
                 "[cluster][limits][home]") {
  int confirmed_rounds = 0;
  for (int round = 0; round < 20; ++round) {
    const std::string id = "hold-" + std::to_string(round);
    REQUIRE(limits.reserve(tx(id)).allowed());
    std::atomic<int> confirmed{0};
    std::atomic<int> cancelled{0};
    race({[&] {
            try {
              confirmed += limits.confirm(id, 60).already ? 0 : 1;
            } catch (const Error& e) {
              CHECK(e.code() == errc::conflict);
            }
          },
          [&] {
            try {
              cancelled += limits.cancel(id) == CancelResult::cancelled ? 1 : 0;
            } catch (const Error& e) {
              CHECK(e.code() == errc::conflict);
            }
          },
          [&] {
            try {
              limits.refund(id, 10, "r");
            } catch (const Error& e) {
              CHECK(e.code() == errc::conflict); // not consumed (yet): refused, nothing moved
            }
          }});
    CHECK(confirmed + cancelled == 1);
    confirmed_rounds += confirmed;
    // both shapes tell the same story
    CHECK(dept() == merchant());
  }
  const Usage expected{confirmed_rounds, 60 * confirmed_rounds};
  CHECK(dept().count == expected.count);
  CHECK(dept().amount <= expected.amount); // a refund that came after its confirm took 10
  CHECK(dept() == merchant());
}

TEST_CASE_METHOD(SpreadLimits, "a refused cancel writes nothing; refunds still work",
                 "[cluster][limits][home]") {
  REQUIRE(limits.consume(tx("paid", 300)).allowed());
  const Error refused = error_of([&] { limits.cancel("paid"); });
  CHECK(refused.code() == errc::conflict);
  CHECK(refused.outcome() == Outcome::failed);
  CHECK(limits.refund("paid", 100, "first").refunded_now == 100);
  CHECK(limits.refund("paid").refunded_now == 200);
  CHECK(dept() == Usage{0, 0});
  CHECK(merchant() == Usage{0, 0});

  // the same for a transaction of one slot
  limits.set_rules(
      RuleSet().add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(1000)));
  REQUIRE(limits.consume(tx("single", 300)).allowed());
  CHECK(error_of([&] { limits.cancel("single"); }).code() == errc::conflict);
  CHECK(limits.refund("single").refunded_now == 300);
  CHECK(merchant() == Usage{0, 0});
}

TEST_CASE_METHOD(SpreadLimits, "a denial replays with its denial, after the rules changed",
                 "[cluster][limits][home]") {
  limits.set_rules(
      RuleSet()
          .add(Rule("dept-day").where("dept").per(Period::day).max_amount(1000))
          .add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(50)));
  const Decision denied = limits.consume(tx("big"));
  REQUIRE_FALSE(denied.allowed());
  REQUIRE(denied.denial);
  CHECK(denied.denial->rule == "merchant-day");
  CHECK(dept() == Usage{0, 0}); // the dept share was voided

  limits.set_rules(RuleSet().add(Rule("dept-day").where("dept").per(Period::day).max_amount(1000)));
  const Decision replay = limits.consume(tx("big"));
  CHECK(replay.replayed);
  CHECK_FALSE(replay.allowed());
  REQUIRE(replay.denial);
  CHECK(replay.denial->rule == "merchant-day");
  // a batch decides alike
  const auto batch = limits.consume_many({tx("big")});
  REQUIRE(std::holds_alternative<Decision>(batch.front()));
  CHECK(std::get<Decision>(batch.front()).replayed);
  CHECK_FALSE(std::get<Decision>(batch.front()).allowed());
  CHECK(dept() == Usage{0, 0});
}
