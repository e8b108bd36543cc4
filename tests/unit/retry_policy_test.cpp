// The retry policy without a server: which replies are retried, the back-off, the budget, and
// the one resend policy of an operation's calls.
#include <catch2/catch.hpp>

#include <thread>

#include "redis/operation_resends.hpp"
#include "redis/retry_policy.hpp"

using namespace std::chrono_literals;
using limitcounter::Reply;
using limitcounter::detail::classify;
using limitcounter::detail::is_transient_error;
using limitcounter::detail::ReplyKind;
using limitcounter::detail::RetryPolicy;

TEST_CASE("replies that say the command did not run are told apart", "[retry]") {
  CHECK(is_transient_error("TRYAGAIN Multiple keys request during rehashing of slot"));
  CHECK(is_transient_error("CLUSTERDOWN The cluster is down"));
  CHECK(is_transient_error("LOADING Redis is loading the dataset in memory"));
  CHECK(is_transient_error("MASTERDOWN Link with MASTER is down"));
  // before: BUSY was returned as a final error, never retried
  CHECK(is_transient_error("BUSY Redis is busy running a script. You can only call SCRIPT KILL"));
  CHECK_FALSE(is_transient_error("BUSYGROUP Consumer Group name already exists"));
  CHECK_FALSE(is_transient_error("BUSYKEY Target key name already exists."));
  CHECK_FALSE(is_transient_error("NOSCRIPT No matching script"));
  CHECK_FALSE(is_transient_error("ERR LOADING is a word here"));

  CHECK(classify(Reply::integer(1), true) == ReplyKind::final);
  CHECK(classify(Reply::string("LOADING"), true) == ReplyKind::final); // a value, not an error
  CHECK(classify(Reply::error("ERR bad"), true) == ReplyKind::final);
  CHECK(classify(Reply::error("BUSY Redis is busy"), false) == ReplyKind::transient);
  CHECK(classify(Reply::error("MOVED 3999 127.0.0.1:6381"), true) == ReplyKind::redirect);
  CHECK(classify(Reply::error("ASK 3999 127.0.0.1:6381"), true) == ReplyKind::redirect);
  // a standalone server never redirects: the text is returned as it is
  CHECK(classify(Reply::error("MOVED 3999 127.0.0.1:6381"), false) == ReplyKind::final);
  CHECK(classify(Reply::error("MOVED nonsense"), true) == ReplyKind::final);
  CHECK(classify(Reply::error("NOSCRIPT No matching script"), false) == ReplyKind::noscript);
  CHECK(classify(Reply::error("NOAUTH Authentication required."), false) == ReplyKind::noauth);
}

TEST_CASE("a library not loaded, or FCALL refused, is a script call that did not run", "[retry]") {
  using limitcounter::detail::refuses_functions;
  // the texts Redis 7.0 answers
  CHECK(classify(Reply::error("ERR Function not found"), false) == ReplyKind::noscript);
  const char* const refusals[] = {
      "ERR unknown command 'FCALL', with args beginning with: 'f' '0' ",
      "ERR unknown command 'FUNCTION', with args beginning with: 'LOAD' 'x' ",
      "NOPERM this user has no permissions to run the 'fcall' command",
      "NOPERM this user has no permissions to run the 'function|load' command"};
  for (const char* refusal : refusals) {
    CHECK(refuses_functions(refusal));
    CHECK(classify(Reply::error(refusal), false) == ReplyKind::noscript);
  }
  // a script's own errors and other refusals are not
  CHECK_FALSE(refuses_functions("ERR Function not found"));
  CHECK_FALSE(refuses_functions("ERR unknown command 'EVALSHA', with args beginning with: "));
  CHECK_FALSE(refuses_functions("NOPERM this user has no permissions to access one of the keys"));
  CHECK_FALSE(refuses_functions("ERR user_script:1: the word 'fcall' in a script's error"));
  CHECK(classify(Reply::error("ERR Function not found here"), false) == ReplyKind::final);
}

TEST_CASE("transient replies back off and stop when the budget is spent", "[retry]") {
  const RetryPolicy::Clock::time_point t0{};
  RetryPolicy policy(50ms, t0);
  CHECK(policy.deadline() == t0 + 50ms);
  CHECK(policy.attempts() == 1);
  CHECK(policy.after_transient(t0 + 1ms) == 10ms);
  CHECK(policy.after_transient(t0 + 12ms) == 20ms);
  // the back-off (40 ms) is cut to the time left: no sleep runs past the deadline
  CHECK(policy.after_transient(t0 + 33ms) == 17ms);
  CHECK(policy.attempts() == 4);
  // the retry after that sleep was the last one
  CHECK_FALSE(policy.after_transient(t0 + 50ms));
  CHECK_FALSE(policy.after_transient(t0 + 51ms));
  CHECK(policy.attempts() == 4);

  // before: six attempts and 310 ms of sleeping whatever the budget; now a large budget
  // allows more, a small one fewer, and the sum of sleeps never passes it
  for (const auto budget : {1ms, 5ms, 50ms, 310ms, 2000ms}) {
    RetryPolicy each(budget, t0);
    auto now = t0;
    while (const auto pause = each.after_transient(now)) {
      now += *pause;
    }
    CHECK(now == t0 + budget);
  }
}

TEST_CASE("redirections and re-sends stop at the budget, redirections also at a hop count",
          "[retry]") {
  const RetryPolicy::Clock::time_point t0{};
  RetryPolicy policy(1000ms, t0);
  for (int hop = 0; hop < RetryPolicy::max_hops; ++hop) {
    CHECK(policy.after_hop(t0 + 1ms));
  }
  CHECK_FALSE(policy.after_hop(t0 + 2ms)); // a MOVED loop ends without waiting for the budget
  CHECK(policy.attempts() == 1 + RetryPolicy::max_hops);
  CHECK(policy.may_resend(t0 + 999ms));
  CHECK_FALSE(policy.may_resend(t0 + 1000ms));

  RetryPolicy late(10ms, t0);
  CHECK_FALSE(late.after_hop(t0 + 10ms));
}

// What a pipeline keeps as "not run" (the failure policy may then decide in Redis's place) and
// what as "may have run" (Outcome::unknown): counting a call that ran as not run would let the
// failure policy count a transaction Redis counted.
TEST_CASE("the failures that prove a call did not run", "[retry]") {
  using limitcounter::errc;
  using limitcounter::Error;
  using limitcounter::Outcome;
  using limitcounter::detail::did_not_run;
  using limitcounter::detail::ServerUnavailable;
  CHECK(did_not_run(ServerUnavailable(errc::server_error, "LOADING until the budget ended")));
  CHECK(did_not_run(ServerUnavailable(errc::cluster_down, "CLUSTERDOWN until the budget ended")));
  CHECK(did_not_run(Error(errc::circuit_open, "breaker open")));
  CHECK(did_not_run(Error(errc::connect_failed, "connection refused")));
  CHECK(did_not_run(Error(errc::pool_exhausted, "all connections busy")));
  CHECK(did_not_run(Error(errc::cluster_down, "no node serves slot 7")));
  // sent, and then no reply: it may have run
  CHECK_FALSE(did_not_run(Error(errc::timeout, "no reply within 300 ms", Outcome::unknown)));
  CHECK_FALSE(did_not_run(Error(errc::io_error, "connection reset", Outcome::unknown)));
  // a server error reply that is not a refusal: the script ran (or failed on its own)
  CHECK_FALSE(did_not_run(Error(errc::server_error, "ERR script failed", Outcome::failed)));
}

TEST_CASE("resends after lost replies: jittered doubling back-off, ended by attempts or budget",
          "[retry]") {
  using limitcounter::RetryOptions;
  using limitcounter::detail::ResendPolicy;
  const auto t0 = ResendPolicy::Clock::now();
  ResendPolicy policy(RetryOptions{4, 1000ms, 20ms}, t0);
  CHECK(policy.sends() == 1);
  // each pause lies between half the back-off and all of it; the back-off doubles
  CHECK(policy.after_lost(t0, 0.0) == 10ms);
  CHECK(policy.after_lost(t0 + 100ms, 0.999) == 39ms);
  CHECK(policy.after_lost(t0 + 200ms, 0.5) == 60ms);
  CHECK(policy.sends() == 4);
  CHECK_FALSE(policy.after_lost(t0 + 300ms, 0.5)); // the fourth send was the last

  ResendPolicy late(RetryOptions{10, 100ms, 80ms}, t0);
  CHECK(late.after_lost(t0 + 90ms, 1.0) == 10ms); // cut to the time left
  CHECK_FALSE(late.after_lost(t0 + 100ms, 0.0));  // no send starts past the budget

  ResendPolicy once(RetryOptions{1, 1000ms, 20ms}, t0);
  CHECK_FALSE(once.after_lost(t0, 0.0));
  CHECK(once.sends() == 1);
}

TEST_CASE("the calls of one operation share one resend policy, per Redis and per thread",
          "[retry]") {
  using limitcounter::detail::OperationResends;
  limitcounter::RedisOptions options; // (a Redis connects at its first call: none here)
  const limitcounter::Redis redis(options);
  const limitcounter::Redis other(options);
  CHECK(OperationResends::of(redis.options()) == nullptr);
  {
    const OperationResends operation(redis);
    limitcounter::detail::ResendPolicy* const shared = OperationResends::of(redis.options());
    REQUIRE(shared != nullptr);
    CHECK(OperationResends::of(limitcounter::Redis(redis).options()) == shared); // a copy
    CHECK(OperationResends::of(other.options()) == nullptr);
    {
      const OperationResends step(redis); // joins the operation's
      CHECK(OperationResends::of(redis.options()) == shared);
      CHECK(shared->after_lost(std::chrono::steady_clock::now(), 0.0));
    }
    CHECK(OperationResends::of(redis.options()) == shared);
    CHECK(shared->sends() == 2); // the step's resend counted for the operation
    std::thread([&] { CHECK(OperationResends::of(redis.options()) == nullptr); }).join();
  }
  CHECK(OperationResends::of(redis.options()) == nullptr);
}
