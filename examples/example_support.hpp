#pragma once
// What every example shares: where Redis is, a check that reports what held, and what a
// production host does with a failed call (`Outcome` in <limitcounter/error.hpp>):
//
//   Outcome::unknown   the reply was lost (a timeout, a cut after sending); the call may have
//                      run. A call with an id (consume, refund, deduct, grab, close, ...) is
//                      sent again with the same id: it replays its first result and moves
//                      nothing twice (`with_same_id`). A call without an id (add,
//                      take_daily_cap, hit_sliding_window) is not: it would count twice.
//                      Count it conservatively (as if it ran) and reconcile (`at_most_once`).
//   Outcome::not_sent  nothing reached Redis. An infrastructure error (no connection, open
//                      breaker) is sent again after a back-off; an input error is a bug.
//   Outcome::failed    Redis refused the command and changed nothing; it would refuse again.
//
// Alert on what these helpers throw: an input error, Outcome::failed, or Redis not answering
// for `patience`. A call with an id can still be retried later, within its replay horizon.
// When the library re-sends after a lost reply itself (RedisOptions' retry options), these
// helpers only see what it gave up on, and stay correct.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include <limitcounter/error.hpp>

namespace example {

/// The Redis URI: the first argument, else $LIMITCOUNTER_REDIS_URI, else the local default.
inline std::string redis_uri(int argc, char** argv) {
  if (argc > 1) {
    return argv[1];
  }
  if (const char* from_env = std::getenv("LIMITCOUNTER_REDIS_URI")) {
    return from_env;
  }
  return "redis://127.0.0.1:6379";
}

/// How long a call is tried again before its error is final: well past the breaker's pause
/// (1 s by default), so that a short outage or a busy host costs time, not a failed example.
inline constexpr std::chrono::seconds patience{30};

/// Calls re-sent so far, for the example's summary line.
inline std::atomic<int> resent_after_unknown{0};
inline std::atomic<int> resent_after_not_sent{0};
inline std::atomic<int> unknown_not_resent{0};

namespace detail {

// Runs `call` until it returns; re-sends it after an infrastructure error that sent nothing,
// and after Outcome::unknown only when `resend_unknown` (the call has an id). Returns nullopt
// for an unknown outcome that is not re-sent.
template <typename Call>
auto retry(Call&& call, bool resend_unknown) -> std::optional<decltype(call())> {
  const auto give_up = std::chrono::steady_clock::now() + patience;
  std::chrono::milliseconds pause{10};
  for (;;) {
    try {
      return call();
    } catch (const limitcounter::Error& error) {
      const bool unknown = error.outcome() == limitcounter::Outcome::unknown;
      const bool nothing_ran =
          error.outcome() == limitcounter::Outcome::not_sent && !error.is_input_error();
      if (unknown && !resend_unknown) {
        ++unknown_not_resent;
        return std::nullopt;
      }
      if (!(unknown || nothing_ran) || std::chrono::steady_clock::now() >= give_up) {
        throw;
      }
      ++(unknown ? resent_after_unknown : resent_after_not_sent);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds{500});
  }
}

} // namespace detail

/// Runs a call with an id until Redis answers it: after a lost reply the same id replays. Reads
/// (usage, account, ...) go through it too: reading twice changes nothing.
template <typename Call> auto with_same_id(Call&& call) -> decltype(call()) {
  return *detail::retry(std::forward<Call>(call), true);
}

/// Runs a call without an id: sent again only when nothing ran; empty when its reply was lost
/// (it may have counted: the caller counts it conservatively and reconciles).
template <typename Call> auto at_most_once(Call&& call) -> std::optional<decltype(call())> {
  return detail::retry(std::forward<Call>(call), false);
}

/// One line on what the helpers did, so that a run shows the contract at work.
inline void print_resends() {
  std::cout << "  calls re-sent with the same id after a lost reply: " << resent_after_unknown
            << "; after nothing was sent: " << resent_after_not_sent
            << "; calls without an id whose reply was lost (counted conservatively): "
            << unknown_not_resent << '\n';
}

/// Prints whether `condition` held; the example's exit code counts the failures. A thread
/// started by `thread` never ends the process with an exception: it is reported and failed.
class Checks {
public:
  void expect(bool condition, const std::string& what) {
    std::cout << (condition ? "  [ok]   " : "  [FAIL] ") << what << '\n';
    failures_ += condition ? 0 : 1;
  }
  /// A thread whose top catches, reports and counts whatever `body` throws.
  template <typename Body> std::thread thread(std::string name, Body body) {
    return std::thread([this, name = std::move(name), body = std::move(body)]() mutable {
      try {
        body();
      } catch (const std::exception& error) {
        std::cerr << name << " stopped: " << error.what() << '\n';
        ++thread_failures_;
      }
    });
  }
  /// After the threads are joined: a check that none stopped on an exception.
  void expect_threads_finished() {
    expect(thread_failures_ == 0, "every thread finished its work (" +
                                      std::to_string(thread_failures_) + " stopped on an error)");
  }
  int exit_code() const { return failures_ == 0 ? EXIT_SUCCESS : EXIT_FAILURE; }

private:
  int failures_ = 0;
  std::atomic<int> thread_failures_{0};
};

} // namespace example
