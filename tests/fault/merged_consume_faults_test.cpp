// Consumes merged into one batch script call (LimitCounterOptions::consume_in_flight)
// must be decided as each would be alone. Checked from the server's side.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <limitcounter/limitcounter.hpp>

#include "support/fault_proxy.hpp"
#include "support/probe.hpp"
#include "support/proxied_server.hpp"

using namespace std::chrono_literals;
using limitcounter::Decision;
using limitcounter::Dimension;
using limitcounter::Error;
using limitcounter::LimitCounter;
using limitcounter::LimitCounterOptions;
using limitcounter::Period;
using limitcounter::Redis;
using limitcounter::RedisOptions;
using limitcounter::Rule;
using limitcounter::RuleSet;
using limitcounter::Transaction;
using limitcounter::TransactionState;
using limitcounter::testing::command_calls;
using limitcounter::testing::Fault;
using limitcounter::testing::FaultProxy;
using limitcounter::testing::FaultRule;
using limitcounter::testing::ProxiedServer;
using limitcounter::testing::script_call_with_key_prefix;
using limitcounter::testing::script_calls;

namespace {

struct MergeFixture : ProxiedServer {
  RedisOptions through() const { return through_proxy(3s); }
};

Transaction payment(const std::string& id, const std::string& merchant) {
  return Transaction{id, {{"merchant", merchant}}, 10};
}

} // namespace

// A consume queued behind a stalled call is sent, merged, with the `now` of the oldest queued
// consume. A reservation's hold that expired after that `now` but before this consume was made
// still stands in its way: it is denied where a lone consume (its own `now`) is allowed, and
// the exhausted cache then keeps that denial (the hold had ended by this consume's own time).
TEST_CASE_METHOD(MergeFixture,
                 "a merged consume made after a hold expired is decided at its own "
                 "time, not at the oldest queued consume's",
                 "[fault][coalesce]") {
  LimitCounterOptions options;
  options.key_prefix = prefix;
  options.consume_in_flight = 1;
  options.reservation_timeout = 300ms;
  options.exhausted_cache.enabled = true;
  options.exhausted_cache.max_staleness = 10s;
  LimitCounter limits(Redis(through()), limitcounter::Calendar("UTC"), options);
  limits.set_rules(RuleSet().add(Rule("m-day").where("merchant").per(Period::day).max_count(1)));

  // m1's only place is held by a reservation for 300 ms.
  const auto held_at = std::chrono::steady_clock::now();
  REQUIRE(limits.reserve(payment("hold", "m1")).allowed());

  // A consume on m2 takes the one place in flight; its reply is held for 1 s.
  FaultRule stall;
  stall.matches = script_call_with_key_prefix(prefix);
  stall.fault = Fault::delay_reply;
  stall.delay = 1s;
  proxy.add_rule(stall);
  const long long before = script_calls(direct);
  std::optional<Decision> first;
  std::thread stalled([&] { first = limits.consume(payment("first", "m2")); });
  while (script_calls(direct) == before) {
    std::this_thread::yield();
  }
  // Queued at once: a consume on m3 (its `now` is before the hold's end) ...
  std::optional<Decision> early;
  std::thread early_caller([&] { early = limits.consume(payment("early", "m3")); });
  // ... and one on m1 made well after the hold expired.
  std::this_thread::sleep_until(held_at + 650ms);
  std::optional<Decision> late;
  std::thread late_caller([&] { late = limits.consume(payment("late", "m1")); });
  stalled.join();
  early_caller.join();
  late_caller.join();

  REQUIRE(first);
  REQUIRE(early);
  REQUIRE(late);
  CHECK(first->allowed());
  CHECK(early->allowed());
  // Merged: the server ran the reserve, the stalled consume and one call for the other two.
  CHECK(script_calls(direct) - before == 2);
  // A lone consume of "late" at its own time releases the expired hold and is allowed.
  CHECK(late->allowed());
  CHECK(record_state(options, "late") == TransactionState::consumed);
  CHECK(record_state(options, "hold") == TransactionState::expired);
}

namespace {

// The stalled first consume, then `queued` consumes queued behind it (merged into one call
// that meets `fault`); returns each queued caller's error (none: decided).
std::vector<std::optional<Error>> merged_call_meets(MergeFixture& f, LimitCounter& limits,
                                                    Fault fault, const std::string& error_text,
                                                    int queued) {
  FaultRule stall;
  stall.matches = script_call_with_key_prefix(f.prefix);
  stall.fault = Fault::delay_reply;
  stall.delay = 500ms;
  f.proxy.add_rule(stall);
  FaultRule then;
  then.matches = script_call_with_key_prefix(f.prefix);
  then.fault = fault;
  then.error = error_text;
  f.proxy.add_rule(then);
  const long long before = script_calls(f.direct);
  std::thread first([&] { limits.consume(payment("q-0", "m1")); });
  while (script_calls(f.direct) == before) {
    std::this_thread::yield();
  }
  std::vector<std::optional<Error>> errors(queued);
  std::vector<std::thread> callers;
  for (int i = 0; i < queued; ++i) {
    callers.emplace_back([&, i] {
      try {
        limits.consume(payment("q-" + std::to_string(i + 1), "m1"));
      } catch (const Error& e) {
        errors[i] = e;
      }
    });
  }
  first.join();
  for (auto& caller : callers) {
    caller.join();
  }
  return errors;
}

} // namespace

TEST_CASE_METHOD(MergeFixture,
                 "a merged call cut mid-reply or answered with an error: each caller "
                 "unknown, each retry with its id counts once",
                 "[fault][coalesce]") {
  const Fault fault =
      GENERATE(Fault::cut_mid_reply, Fault::error_reply, Fault::blackhole, Fault::drop_reply);
  INFO(limitcounter::testing::to_string(fault));
  LimitCounterOptions options;
  options.key_prefix = prefix;
  options.consume_in_flight = 1;
  options.exhausted_cache.enabled = true;
  RedisOptions ro = through();
  LimitCounter limits(Redis(ro), limitcounter::Calendar("UTC"), options);
  limits.set_rules(RuleSet().add(Rule("m-day").where("merchant").per(Period::day).max_count(5)));
  constexpr int queued = 8;
  const auto errors = merged_call_meets(*this, limits, fault, "ERR injected", queued);
  int unknown = 0;
  for (const auto& e : errors) {
    unknown += e && e->outcome() == limitcounter::Outcome::unknown;
    if (e) {
      UNSCOPED_INFO("error " << e->what() << " outcome " << static_cast<int>(e->outcome()));
    } else {
      UNSCOPED_INFO("no error");
    }
  }
  CHECK(unknown == queued);
  // Retries with the same ids: the cap holds and each caller is told what Redis recorded.
  int wrong = 0;
  int allowed = 0;
  for (int i = 1; i <= queued; ++i) {
    const std::string id = "q-" + std::to_string(i);
    const Decision d = limits.consume(payment(id, "m1"));
    allowed += d.allowed();
    wrong += d.allowed() != (record_state(options, id) == TransactionState::consumed);
  }
  CHECK(wrong == 0);
  LimitCounter reader(direct, limitcounter::Calendar("UTC"), options);
  const auto used = reader.usage("merchant", Dimension{"m1"}, Period::day);
  CHECK(used.count == allowed + 1);
  CHECK(used.count == 5);
}

TEST_CASE_METHOD(MergeFixture,
                 "one connection, 8 consumes in flight, a stalled reply: every caller "
                 "returns; what was not sent is not recorded, what was allowed is recorded",
                 "[fault][coalesce]") {
  LimitCounterOptions options;
  options.key_prefix = prefix;
  options.consume_in_flight = 8;
  RedisOptions ro = through();
  ro.pool_size = 1;
  ro.pool_wait_timeout = 300ms;
  LimitCounter limits(Redis(ro), limitcounter::Calendar("UTC"), options);
  limits.set_rules(RuleSet().add(Rule("m-day")
                                     .where("merchant")
                                     .per(Period::day)
                                     .max_count(100)
                                     .on_redis_failure(limitcounter::FailurePolicy::allow)));
  FaultRule stall;
  stall.matches = script_call_with_key_prefix(prefix);
  stall.fault = Fault::delay_reply;
  stall.delay = 1s;
  proxy.add_rule(stall);
  constexpr int threads = 24;
  std::vector<std::optional<Decision>> decided(threads);
  std::atomic<int> errors{0};
  std::vector<std::thread> workers;
  const auto started = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      try {
        decided[t] = limits.consume(payment("p-" + std::to_string(t), "m1"));
      } catch (const Error&) {
        ++errors;
      }
    });
  }
  for (auto& worker : workers) {
    worker.join();
  }
  CHECK(std::chrono::steady_clock::now() - started < 5s);
  CHECK(errors == 0);
  int recorded_allowed = 0;
  int wrong = 0;
  for (int t = 0; t < threads; ++t) {
    if (!decided[t]) {
      continue;
    }
    const TransactionState state = record_state(options, "p-" + std::to_string(t));
    if (decided[t]->degraded) {
      wrong += state != TransactionState::none;
    } else {
      wrong += decided[t]->allowed() != (state == TransactionState::consumed);
      recorded_allowed += state == TransactionState::consumed;
    }
  }
  CHECK(wrong == 0);
  LimitCounter reader(direct, limitcounter::Calendar("UTC"), options);
  CHECK(reader.usage("merchant", Dimension{"m1"}, Period::day).count == recorded_allowed);
}

// A merged call whose script fails (here: the second transaction's counter set name is taken by
// another text) writes nothing, not even the transactions before the failing one (the script
// checks every counter set before its first record). Each caller still hears Outcome::unknown,
// the conservative answer for a merged call, and a retry with its id decides it.
TEST_CASE_METHOD(MergeFixture,
                 "a merged call that fails writes nothing; each caller hears unknown and its "
                 "retry decides",
                 "[fault][coalesce]") {
  LimitCounterOptions options;
  options.key_prefix = prefix;
  options.consume_in_flight = 1;
  LimitCounter limits(Redis(through()), limitcounter::Calendar("UTC"), options);
  limits.set_rules(
      RuleSet()
          .add(
              Rule("a-day").where("channel", "a").where("merchant").per(Period::day).max_count(100))
          .add(Rule("b-hour")
                   .where("channel", "b")
                   .where("merchant")
                   .per(Period::hour)
                   .max_count(100)));
  const auto by = [](const std::string& id, const std::string& kind) {
    return Transaction{id, {{"channel", kind}, {"merchant", "m1"}}, 10};
  };
  // A consume of kind b, alone: its record names its counter set; that name is then taken by
  // another text, so the next consume of kind b fails in the script.
  REQUIRE(limits.consume(by("probe", "b")).allowed());
  const std::string text = direct.command({"GET", limits.keys().transaction("probe")}).as_string();
  std::vector<std::string> words;
  for (std::size_t at = 0; at != std::string::npos;) {
    const std::size_t space = text.find(' ', at);
    words.push_back(text.substr(at, space == std::string::npos ? space : space - at));
    at = space == std::string::npos ? space : space + 1;
  }
  REQUIRE(words.size() >= 4);
  const std::string set_key = prefix + "cs:" + words[3];
  REQUIRE(direct.command({"EXISTS", set_key}).as_integer() == 1);
  direct.command({"SET", set_key, "1\nother"});
  const Error alone = limitcounter::testing::error_of([&] { limits.consume(by("alone", "b")); });
  CHECK(alone.outcome() == limitcounter::Outcome::failed); // alone: nothing written
  CHECK(record_state(options, "alone") == TransactionState::none);

  // A stalled consume holds the place; "a" (kind a) and "b" (kind b) queue and go
  // together: "b"'s counter set fails the script before "a" is written.
  FaultRule stall;
  stall.matches = script_call_with_key_prefix(prefix);
  stall.fault = Fault::delay_reply;
  stall.delay = 500ms;
  proxy.add_rule(stall);
  const long long before = script_calls(direct);
  std::thread first([&] { limits.consume(by("first", "a")); });
  while (script_calls(direct) == before) {
    std::this_thread::yield();
  }
  std::optional<Error> a_error;
  std::optional<Error> b_error;
  std::thread a([&] {
    try {
      limits.consume(by("a", "a"));
    } catch (const Error& e) {
      a_error = e;
    }
  });
  std::this_thread::sleep_for(100ms);
  std::thread b([&] {
    try {
      limits.consume(by("b", "b"));
    } catch (const Error& e) {
      b_error = e;
    }
  });
  first.join();
  a.join();
  b.join();
  CHECK(script_calls(direct) - before == 2); // "a" and "b" in one call
  // The server wrote nothing of the failed call ...
  CHECK(record_state(options, "a") == TransactionState::none);
  LimitCounter reader(direct, limitcounter::Calendar("UTC"), options);
  CHECK(reader.usage("channel+merchant", Dimension{"a", "m1"}, Period::day).count == 1);
  // ... each caller hears unknown, and "a" sent again is decided once.
  REQUIRE(a_error);
  CHECK(a_error->outcome() == limitcounter::Outcome::unknown);
  REQUIRE(b_error);
  CHECK(b_error->outcome() == limitcounter::Outcome::unknown);
  proxy.clear();
  CHECK(limits.consume(by("a", "a")).allowed());
  CHECK(reader.usage("channel+merchant", Dimension{"a", "m1"}, Period::day).count == 2);
}
