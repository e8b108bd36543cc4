// Limits spread over several cluster slots under concurrency: one authoritative home record
// per transaction decides who is first, which of confirm and cancel wins, and that a refused
// operation writes nothing.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <set>
#include <thread>
#include <variant>
#include <vector>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/limitcounter.hpp>

#include "limit_counter/declared_keys.hpp"
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

  explicit SpreadLimits(std::uint32_t buckets = 1,
                        std::chrono::milliseconds reservation_timeout = std::chrono::minutes{15})
      : limits{redis, Calendar("UTC"), [buckets, reservation_timeout] {
                 LimitCounterOptions options;
                 options.key_prefix = unique_prefix() + "home:";
                 options.counter_buckets = buckets;
                 options.reservation_timeout = reservation_timeout;
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

// The same, run once with one bucket per counter and once with each counter spread over 64.
struct SpreadLimitsOverBuckets : SpreadLimits {
  SpreadLimitsOverBuckets() : SpreadLimits(GENERATE(1U, 64U)) {}
};

// The script calls (EVALSHA, FCALL) every node of the shared cluster has run.
long long script_calls_on_every_node() {
  long long calls = 0;
  for (const testing::RedisServer* node : shared_cluster().nodes()) {
    Redis direct(node->options());
    calls += testing::script_calls(direct);
  }
  return calls;
}

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

// consume_many sends each step of all its transactions in one pipeline: racing consume and
// another consume_many of the same ids, each id is still first exactly once.
TEST_CASE_METHOD(SpreadLimitsOverBuckets,
                 "consume_many racing consume_many and consume of the same ids: each is first once",
                 "[cluster][limits][home][batch]") {
  for (int round = 0; round < 8; ++round) {
    std::vector<Transaction> batch;
    for (int i = 0; i < 8; ++i) {
      batch.push_back(tx("many-" + std::to_string(round) + "-" + std::to_string(i)));
    }
    std::vector<std::atomic<int>> first(batch.size());
    std::atomic<int> not_allowed{0}; // Catch's assertions are not thread-safe: counted here
    const auto count = [&](std::size_t i, const BatchResult<Decision>& result) {
      const auto* decision = std::get_if<Decision>(&result);
      if (decision == nullptr || !decision->allowed()) {
        ++not_allowed;
      } else if (!decision->replayed) {
        ++first[i];
      }
    };
    const auto many = [&] {
      const auto results = limits.consume_many(batch);
      for (std::size_t i = 0; i < results.size(); ++i) {
        count(i, results[i]);
      }
    };
    const auto one_by_one = [&] { // last to first
      for (std::size_t i = batch.size(); i-- > 0;) {
        try {
          count(i, limits.consume(batch[i]));
        } catch (const Error& e) {
          count(i, e);
        }
      }
    };
    race({many, many, one_by_one});
    CHECK(not_allowed == 0);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      INFO("transaction " << batch[i].id);
      CHECK(first[i] == 1);
    }
  }
  CHECK(dept() == Usage{64, 6400});
  CHECK(merchant() == Usage{64, 6400});
}

// Concurrent consumes merged (LimitCounterOptions::consume_in_flight) take their steps together
// on a cluster: the shares of one slot in one script call.
TEST_CASE("16 threads consuming distinct ids through one place in flight: merged shares, each "
          "id first once, each counted once",
          "[cluster][limits][home][coalesce]") {
  Redis redis(shared_cluster().options());
  LimitCounterOptions options;
  options.key_prefix = unique_prefix() + "merge:";
  options.consume_in_flight = 1;
  LimitCounter limits(redis, Calendar("UTC"), options);
  limits.set_rules(RuleSet().add(Rule("m-day").where("merchant").per(Period::day).max_count(1000)));
  constexpr int threads = 16;
  constexpr int per_thread = 20;
  std::atomic<int> first{0};
  std::atomic<int> other{0}; // Catch's assertions are not thread-safe: counted here
  const long long before = script_calls_on_every_node();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        const Transaction tx{"mg-" + std::to_string(t) + "-" + std::to_string(i),
                             {{"merchant", "m" + std::to_string(i % 4)}},
                             5};
        try {
          const Decision decision = limits.consume(tx);
          ++(decision.allowed() && !decision.replayed ? first : other);
        } catch (const Error&) {
          ++other;
        }
      }
    });
  }
  for (auto& worker : workers) {
    worker.join();
  }
  const long long calls = script_calls_on_every_node() - before;
  CHECK(other == 0);
  CHECK(first == threads * per_thread);
  std::int64_t counted = 0;
  for (int m = 0; m < 4; ++m) {
    counted += limits.usage("merchant", Dimension{"m" + std::to_string(m)}, Period::day).count;
  }
  CHECK(counted == threads * per_thread);
  // Alone, each consume is three script calls (begin, share, finish); merged shares are fewer.
  INFO(calls << " script calls for " << threads * per_thread << " consumes");
  CHECK(calls < 3 * threads * per_thread);
}

TEST_CASE_METHOD(SpreadLimitsOverBuckets,
                 "confirm racing cancel racing refund: one wins, every share follows",
                 "[cluster][limits][home]") {
  int confirmed_rounds = 0;
  int refunded_total = 0; // refunds that came after their confirm: 10 each
  for (int round = 0; round < 20; ++round) {
    const std::string id = "hold-" + std::to_string(round);
    REQUIRE(limits.reserve(tx(id)).allowed());
    std::atomic<int> confirmed{0};
    std::atomic<int> cancelled{0};
    std::atomic<int> refunded{0};
    std::atomic<int> other_errors{0}; // Catch's assertions are not thread-safe: counted here
    const auto refused = [&](const Error& e) {
      other_errors += e.code() == errc::conflict ? 0 : 1;
    };
    race({[&] {
            try {
              confirmed += limits.confirm(id, 60).replayed ? 0 : 1;
            } catch (const Error& e) {
              refused(e);
            }
          },
          [&] {
            try {
              const CancelResult result = limits.cancel(id);
              cancelled +=
                  result.status == CancelResult::Status::cancelled && !result.replayed ? 1 : 0;
            } catch (const Error& e) {
              refused(e);
            }
          },
          [&] {
            try {
              refunded += static_cast<int>(limits.refund(id, 10, "r").refunded_now / 10);
            } catch (const Error& e) {
              refused(e); // not consumed (yet): refused, nothing moved
            }
          }});
    CHECK(other_errors == 0);
    CHECK(confirmed + cancelled == 1);
    confirmed_rounds += confirmed;
    refunded_total += refunded;
    // both shapes tell the same story
    CHECK(dept() == merchant());
  }
  CHECK(dept() == Usage{confirmed_rounds, 60 * confirmed_rounds - 10 * refunded_total});
  CHECK(dept() == merchant());
}

TEST_CASE_METHOD(SpreadLimitsOverBuckets,
                 "reserves racing cancels of a fresh id: the shares follow the home record",
                 "[cluster][limits][home]") {
  Usage expected{0, 0};
  for (int round = 0; round < 20; ++round) {
    const std::string id = "fresh-" + std::to_string(round);
    std::atomic<int> reserved{0};
    std::atomic<int> refused_reserves{0};
    std::atomic<int> cancelled{0};
    std::atomic<int> tombstones{0};
    std::atomic<int> other_errors{0};
    std::vector<std::function<void()>> calls;
    for (int i = 0; i < 8; ++i) {
      calls.emplace_back([&] {
        try {
          const Decision decision = limits.reserve(tx(id));
          (decision.allowed() ? reserved : refused_reserves) += 1;
        } catch (const Error& e) {
          other_errors += e.code() == errc::conflict ? 0 : 1;
        }
      });
      calls.emplace_back([&] {
        try {
          const CancelResult result = limits.cancel(id);
          cancelled += result.status == CancelResult::Status::cancelled && !result.replayed ? 1 : 0;
          tombstones += result.status == CancelResult::Status::recorded_unknown ? 1 : 0;
        } catch (const Error& e) {
          other_errors += e.code() == errc::conflict ? 0 : 1; // pending: refused
        }
      });
    }
    race(calls);
    CHECK(other_errors == 0);
    CHECK(cancelled + tombstones <= 1); // one cancel wins, if any
    const auto record = limits.transaction_record(id);
    REQUIRE(record);
    INFO("round " << round << ": " << to_string(record->state) << ", " << reserved << " reserved, "
                  << refused_reserves << " refused, " << cancelled << " cancelled, " << tombstones
                  << " tombstones");
    if (record->state == TransactionState::reserved) {
      CHECK(cancelled + tombstones == 0);
      expected = {expected.count + 1, expected.amount + 100};
    } else {
      CHECK((record->state == TransactionState::cancelled ||
             record->state == TransactionState::tombstone));
    }
    // every share tells the home record's story
    CHECK(dept() == expected);
    CHECK(merchant() == expected);
  }
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

// Issue 13 item 1: every cluster transaction is decided at one home record, also when its rules
// fall in one slot, so that a retry under other rules (another plan, another slot) replays it.
TEST_CASE_METHOD(SpreadLimits, "a retry under changed rules replays the first decision",
                 "[cluster][limits][home]") {
  const Rule by_dept = Rule("dept-day").where("dept").per(Period::day).max_amount(1'000'000);
  const Rule by_merchant =
      Rule("merchant-day").where("merchant").per(Period::day).max_amount(1'000'000);
  const Rule by_channel =
      Rule("channel-day").where("channel").per(Period::day).max_amount(1'000'000);
  const auto payment = [](const std::string& id) {
    return Transaction{id, {{"merchant", "m1"}, {"dept", "cmb"}, {"channel", "ali"}}, 100};
  };
  const auto counters = [&] {
    return std::vector<Usage>{dept(), merchant(),
                              limits.usage("channel", Dimension{"ali"}, Period::day)};
  };
  // Decides under `first_rules`, then retries the id under `retry_rules`: a replay, nothing moved.
  const auto replays = [&](const RuleSet& first_rules, const RuleSet& retry_rules, bool allowed) {
    limits.set_rules(first_rules);
    const Decision first = limits.consume(payment("again"));
    REQUIRE(first.allowed() == allowed);
    const auto before = counters();
    limits.set_rules(retry_rules);
    const Decision retry = limits.consume(payment("again"));
    CHECK(retry.replayed);
    CHECK(retry.allowed() == allowed);
    CHECK(counters() == before);
  };
  SECTION("consumed in one slot, retried over two") {
    replays(RuleSet().add(by_merchant), RuleSet().add(by_dept).add(by_merchant), true);
  }
  SECTION("consumed over two slots, retried in a third alone") {
    replays(RuleSet().add(by_dept).add(by_merchant), RuleSet().add(by_channel), true);
  }
  SECTION("denied over two slots, retried in a third alone") {
    replays(RuleSet().add(by_dept).add(
                Rule("merchant-day").where("merchant").per(Period::day).max_amount(50)),
            RuleSet().add(by_channel), false);
  }
}

namespace {

// Spread limits whose reservations expire after 200 ms.
struct ShortHolds : SpreadLimits {
  ShortHolds() : SpreadLimits(1, std::chrono::milliseconds{200}) {}
  // Confirms `id` at its home record as a client would whose clock says `now_ms` (the home
  // record decides by the client's clock), without the fan-out to the shares.
  Reply confirm_at_home(const std::string& id, long long now_ms) {
    return redis.eval(scripts::transaction_home, {limits.keys().transaction(id)},
                      {"confirm", "-1", std::to_string(now_ms)});
  }
  long long home_hold_expiry(const std::string& id) {
    return std::stoll(testing::record_field(redis, limits.keys().transaction(id), "hexp"));
  }
};

} // namespace

TEST_CASE_METHOD(ShortHolds,
                 "a confirm the home took just before the hold expired reaches "
                 "every share, whoever reserves meanwhile",
                 "[cluster][limits][home]") {
  REQUIRE(limits.reserve(tx("late")).allowed());
  const long long expiry = home_hold_expiry("late");
  std::this_thread::sleep_for(std::chrono::milliseconds{300});
  // another caller's reserve sweeps the expired holds of both shapes
  REQUIRE(limits.reserve(tx("other")).allowed());
  // the confirm reached the home record 1 ms before the hold expired; its fan-out comes now
  REQUIRE(confirm_at_home("late", expiry - 1).at(0).as_string() == "confirmed");
  CHECK(limits.confirm("late").replayed);
  CHECK(dept() == Usage{2, 200});
  CHECK(merchant() == Usage{2, 200});
  CHECK(limits.finish_interrupted(std::chrono::seconds{0}).empty()); // nothing left to follow
}

TEST_CASE_METHOD(ShortHolds,
                 "a share that lost its hold before it followed a confirm is an "
                 "error the caller and the sweep see",
                 "[cluster][limits][home]") {
  REQUIRE(limits.reserve(tx("lost")).allowed());
  const auto record = limits.transaction_record("lost", {});
  REQUIRE(record);
  REQUIRE(record->records.size() == 3); // home, dept share, merchant share
  // the dept share's hold is released as expired (as by a clock far ahead), then the home
  // record takes the confirm
  REQUIRE(detail::eval_declaring(
              redis, {&scripts::limit, {record->records[1]}, {"confirm", "-1", "9007199254740991"}})
              .at(0)
              .as_string() == "expired");
  REQUIRE(confirm_at_home("lost", home_hold_expiry("lost") - 1).at(0).as_string() == "confirmed");
  for (int call = 0; call < 2; ++call) { // a retry says the same
    const Error lost = error_of([&] { limits.confirm("lost"); });
    CHECK(lost.code() == errc::conflict);
    CHECK(lost.outcome() == Outcome::unknown);
    CHECK(std::string(lost.what()).find(record->records[1]) != std::string::npos);
  }
  for (int sweep = 0; sweep < 2; ++sweep) { // the home record stays open: every sweep reports it
    const auto found = limits.finish_interrupted(std::chrono::seconds{0});
    REQUIRE(found.size() == 1);
    CHECK(found.front().transaction_id == "lost");
    CHECK(found.front().state == TransactionState::confirmed);
    CHECK(found.front().shares_lost == 1);
  }
  CHECK(merchant() == Usage{1, 100}); // the other share followed
}

TEST_CASE_METHOD(SpreadLimits, "a begin with another plan leaves a pending record's age alone",
                 "[cluster][limits][home]") {
  // A retry after a rules change is refused (conflict) without running a share: it must not
  // keep the sweep from abandoning the record its first caller left pending.
  const std::string home = limits.keys().transaction("stuck");
  const auto begin = [&](const std::string& plan) {
    return redis
        .eval(scripts::transaction_home, {home}, {"begin", "0123456789a:100", plan, "86400000"})
        .at(0)
        .as_string();
  };
  const auto began = [&] { return testing::record_field(redis, home, "begun"); };
  REQUIRE(begin("plan-a") == "go");
  const std::string first = began();
  std::this_thread::sleep_for(std::chrono::milliseconds{5});
  REQUIRE(begin("plan-b") == "go");
  CHECK(began() == first);
  REQUIRE(begin("plan-a") == "go"); // the first caller's own retry: at work again
  CHECK(began() != first);
}

// Past the replay horizon an id is decided anew, though its share records outlive its home
// record by an hour. A new transaction under the id meets the old shares (another amount: a
// conflict) and leaves its home record pending; the sweep abandons it and voids its plan's
// shares. A void names the transaction's fingerprint and amount, so the old transaction's
// shares are left alone and go on counting it: before, the sweep gave back a paid transaction.
TEST_CASE_METHOD(SpreadLimits, "a sweep of an id used again leaves the old transaction counted",
                 "[cluster][limits][home]") {
  REQUIRE(limits.consume(tx("used-again", 300)).allowed());
  REQUIRE(dept() == Usage{1, 300});
  REQUIRE(merchant() == Usage{1, 300});
  // its home record past the horizon, its share records not yet
  REQUIRE(redis.command({"DEL", limits.keys().transaction("used-again")}).as_integer() == 1);
  CHECK(error_of([&] { limits.consume(tx("used-again", 500)); }).code() == errc::conflict);
  const std::vector<InterruptedFanOut> swept = limits.finish_interrupted(std::chrono::seconds{0});
  REQUIRE(swept.size() == 1);
  CHECK(swept.front().abandoned);
  CHECK(dept() == Usage{1, 300});
  CHECK(merchant() == Usage{1, 300});
}

// A refund with the original past the replay horizon records the transaction anew at its home
// record and at each share. When its fan-out did not reach a share (here: that share's call
// undone, its record deleted and its counter corrected back), the sweep cannot follow there: a
// refund without the original finds no record. It reports the share and leaves the home record
// open, every sweep again, until the host's retry with the original gives back there. Before,
// the sweep closed the record and that share counted the refunded amount for good.
TEST_CASE_METHOD(SpreadLimits, "a sweep reports a share a refund past the horizon did not reach",
                 "[cluster][limits][home]") {
  const Transaction original = tx("refund-anew", 300);
  REQUIRE(limits.consume(original).allowed());
  const auto records = [&] {
    std::set<std::string> keys;
    for (const testing::RedisServer* node : shared_cluster().nodes()) {
      Redis direct(node->options());
      const Reply found = direct.command({"KEYS", limits.keys().prefix() + "*tx:*refund-anew*"});
      for (const Reply& key : found.as_array()) {
        keys.insert(key.as_string());
      }
    }
    return keys;
  };
  for (const std::string& key : records()) { // past the horizon
    REQUIRE(redis.command({"DEL", key}).as_integer() == 1);
  }
  REQUIRE(limits.refund(original, 100, "part").refunded_now == 100);
  REQUIRE(dept() == Usage{1, 200});
  REQUIRE(merchant() == Usage{1, 200});
  std::string dept_share;
  for (const std::string& key : records()) {
    if (key.find("dept") != std::string::npos) {
      dept_share = key;
    }
  }
  REQUIRE_FALSE(dept_share.empty());
  REQUIRE(redis.command({"DEL", dept_share}).as_integer() == 1);
  limits.adjust("dept", Dimension{"cmb"}, Period::day, {"undo-share", 0, 100, "test", "undone"});
  REQUIRE(dept() == Usage{1, 300});
  for (int sweep = 0; sweep < 2; ++sweep) {
    const std::vector<InterruptedFanOut> swept = limits.finish_interrupted(std::chrono::seconds{0});
    REQUIRE(swept.size() == 1);
    CHECK(swept.front().shares_without_record == 1);
    CHECK(dept() == Usage{1, 300});
  }
  const RefundResult retried = limits.refund(original, 100, "part");
  CHECK(retried.replayed);
  CHECK(dept() == Usage{1, 200});
  CHECK(merchant() == Usage{1, 200});
  CHECK(limits.finish_interrupted(std::chrono::seconds{0}).empty());
  CHECK(limits.finish_interrupted(std::chrono::seconds{0}).empty());
}

TEST_CASE("a negative cluster_hold_grace is refused, naming it", "[cluster][limits][home]") {
  LimitCounterOptions options;
  options.key_prefix = unique_prefix() + "home:";
  options.cluster_hold_grace = std::chrono::milliseconds{-1};
  const Error refused =
      error_of([&] { LimitCounter(Redis(shared_cluster().options()), Calendar("UTC"), options); });
  CHECK(refused.code() == errc::invalid_argument);
  CHECK(std::string(refused.what()).find("cluster_hold_grace -1ms") != std::string::npos);
}

// the overloads taking the original (e92d8e9) racing each other and the ones by id,
// while the home record lives: one of confirm and cancel wins, every share follows, and what
// was given back is what the home record says.
TEST_CASE_METHOD(SpreadLimitsOverBuckets, "reversals with the original racing",
                 "[cluster][limits][home]") {
  Usage expected{0, 0};
  for (int round = 0; round < 20; ++round) {
    const std::string id = "orig-" + std::to_string(round);
    const Transaction held = tx(id);
    REQUIRE(limits.reserve(held).allowed());
    std::atomic<int> other_errors{0};
    const auto refused = [&](const Error& e) {
      other_errors += (e.code() == errc::conflict || e.code() == errc::invalid_argument) ? 0 : 1;
    };
    const auto attempt = [&](std::function<void()> call) {
      return [call, &refused] {
        try {
          call();
        } catch (const Error& e) {
          refused(e);
        }
      };
    };
    race({attempt([&] { limits.confirm(held, 60); }), attempt([&] { limits.cancel(held); }),
          attempt([&] { limits.refund(held, 10, "r"); }),
          attempt([&] { limits.refund(id, 20, "s"); }), attempt([&] { limits.refund(held); }),
          attempt([&] { limits.confirm(id, 60); })});
    CHECK(other_errors == 0);
    const auto record = limits.transaction_record(id);
    REQUIRE(record);
    INFO("round " << round << ": " << to_string(record->state) << ", refunded "
                  << record->refunded);
    if (record->state == TransactionState::confirmed) {
      CHECK(record->amount == 60);
      CHECK(record->refunded <= 60);
      expected = {expected.count + (record->refunded == 60 ? 0 : 1),
                  expected.amount + 60 - record->refunded};
    } else {
      CHECK(record->state == TransactionState::cancelled);
    }
    CHECK(dept() == expected);
    CHECK(merchant() == expected);
  }
}

// On a cluster a consume is three steps over several masters: by default concurrent consumes
// merge only when they would wait for a connection (RedisOptions::pool_size in flight), so
// fewer threads than that each take their own steps in parallel, never held behind another's.
TEST_CASE("by default a cluster merges no consumes while fewer than pool_size are in flight",
          "[cluster][limits][home][coalesce]") {
  Redis redis(shared_cluster().options());
  LimitCounterOptions options;
  options.key_prefix = unique_prefix() + "unmerged:";
  LimitCounter limits(redis, Calendar("UTC"), options);
  limits.set_rules(RuleSet().add(Rule("m-day").where("merchant").per(Period::day).max_count(1000)));
  constexpr int threads = 4;
  constexpr int per_thread = 25;
  REQUIRE(redis.options().pool_size > threads);
  std::atomic<int> first{0};
  const long long before = script_calls_on_every_node();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        try {
          first += limits.consume(Transaction{"um-" + std::to_string(t) + "-" + std::to_string(i),
                                              {{"merchant", "m" + std::to_string(i % 4)}},
                                              5})
                           .allowed()
                       ? 1
                       : 0;
        } catch (const Error&) {
        }
      }
    });
  }
  for (auto& worker : workers) {
    worker.join();
  }
  const long long calls = script_calls_on_every_node() - before;
  CHECK(first == threads * per_thread);
  // each consume its own begin, share and finish (merged consumes would share calls)
  INFO(calls << " script calls for " << threads * per_thread << " consumes");
  CHECK(calls >= 3 * threads * per_thread);
}

// A consume's share sent on its own goes as lua/limit.lua's op one (its fast path, in the fewest
// arguments), a reserve's as a decide call. The share's master logs every command it runs
// (SLOWLOG with no threshold): the server's side of which call ran.
TEST_CASE("a lone consume's share runs as op one, a reserve's as a decide call",
          "[cluster][limits][home]") {
  testing::RedisCluster& cluster = shared_cluster();
  Redis redis(cluster.options());
  LimitCounterOptions options;
  options.key_prefix = unique_prefix() + "one:";
  LimitCounter limits(redis, Calendar("UTC"), options);
  limits.set_rules(
      RuleSet().add(Rule("merchant_day").where("merchant").per(Period::day).max_amount(1000)));
  const auto share = [&](const std::string& id) {
    return limits.keys().transaction_share("merchant", id);
  };
  Redis node(cluster.owner_of(detail::key_slot(share("c"))).options());
  const std::string threshold =
      node.command({"CONFIG", "GET", "slowlog-log-slower-than"}).at(1).as_string();
  node.command({"CONFIG", "SET", "slowlog-log-slower-than", "0"});
  node.command({"SLOWLOG", "RESET"});
  const bool consumed = limits.consume(Transaction{"c", {{"merchant", "m1"}}, 10}).allowed();
  const bool reserved = limits.reserve(Transaction{"r", {{"merchant", "m1"}}, 10}).allowed();
  const Reply log = node.command({"SLOWLOG", "GET", "-1"});
  node.command({"CONFIG", "SET", "slowlog-log-slower-than", threshold});
  REQUIRE(consumed);
  REQUIRE(reserved);
  // the op of the script call (FCALL or EVALSHA <name> <numkeys> <keys...> <op> ...) on `key`
  const auto op_on = [&](const std::string& key) {
    for (const Reply& entry : log.as_array()) {
      const auto& args = entry.at(3).as_array();
      if (args.size() > 3 && args[3].as_string() == key) {
        return args.at(3 + std::stoul(args[2].as_string())).as_string();
      }
    }
    return std::string("(none)");
  };
  CHECK(op_on(share("c")) == "one");
  CHECK(op_on(share("r")) == "reserve");
}
