#pragma once
// Reports one call of a job (or each item of a batch) to the observer: its result and
// latency, or its Error.

#include <chrono>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <limitcounter/batch.hpp>
#include <limitcounter/error.hpp>
#include <limitcounter/observer.hpp>

namespace limitcounter::detail {

/// Runs `run()` and, if `observer` is set, reports it: `report(&result, latency)` when it
/// returns, or `observer->on_error(e)` then `report(null, latency)` (a null of the result's type)
/// when it throws an Error, which is thrown on. The latency comes from the steady clock, so a step
/// of the system clock during the call cannot make it negative.
template <typename Run, typename Report>
auto observed_call(LimitObserver* observer, Run&& run, Report&& report) -> decltype(run()) {
  if (observer == nullptr) {
    return run();
  }
  const auto started = std::chrono::steady_clock::now();
  try {
    auto result = run();
    report(&result, std::chrono::steady_clock::now() - started);
    return result;
  } catch (const Error& e) {
    const auto latency = std::chrono::steady_clock::now() - started;
    observer->on_error(e);
    report(static_cast<const std::decay_t<decltype(run())>*>(nullptr), latency);
    throw;
  }
}

/// `observed_call` for a batch: each item is reported with the latency of the whole batch,
/// an item's own Error to `on_error` and as `report(null, latency)`; an Error of the
/// whole batch is reported once, and thrown on.
template <typename T, typename Run, typename Report>
std::vector<BatchResult<T>> observed_batch_call(LimitObserver* observer, Run&& run,
                                                Report&& report) {
  if (observer == nullptr) {
    return run();
  }
  const auto started = std::chrono::steady_clock::now();
  std::vector<BatchResult<T>> results =
      observed_call(observer, std::forward<Run>(run), [&](const auto* all, auto latency) {
        if (all == nullptr) {
          report(static_cast<const T*>(nullptr), latency);
        }
      });
  const auto latency = std::chrono::steady_clock::now() - started;
  for (const auto& result : results) {
    if (const auto* error = std::get_if<Error>(&result)) {
      observer->on_error(*error);
      report(static_cast<const T*>(nullptr), latency);
    } else {
      report(&std::get<T>(result), latency);
    }
  }
  return results;
}

} // namespace limitcounter::detail
