#pragma once
// How a careful host calls the library under faults: an infrastructure error (not sent,
// may have run, a breaker that is open) is retried with the same arguments, so the same
// ids, until Redis gives a definite answer. Caller errors (bad input, conflict) are not
// retried: in the simulation they are findings.

#include <atomic>
#include <chrono>
#include <thread>

#include <limitcounter/error.hpp>

namespace limitcounter::simulation {

/// What the retries cost, for the report.
struct RetryStats {
  std::atomic<long> calls{0};
  std::atomic<long> retries{0};
  std::atomic<long> unknown_outcomes{0}; ///< Outcome::unknown: retried with the same id
};

/// Calls `call` until it returns or throws a caller error. Gives up (rethrows) after
/// `max_attempts`, which a healthy-enough run never reaches.
template <typename Call>
auto call_until_definite(RetryStats& stats, Call&& call, int max_attempts = 400)
    -> decltype(call()) {
  ++stats.calls;
  for (int attempt = 1;; ++attempt) {
    try {
      return call();
    } catch (const Error& e) {
      if (e.is_input_error() || attempt >= max_attempts) {
        throw;
      }
      ++stats.retries;
      if (e.outcome() == Outcome::unknown) {
        ++stats.unknown_outcomes;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds{attempt < 10 ? 2 : 20});
    }
  }
}

} // namespace limitcounter::simulation
