// LimitCounter's daily caps and sliding windows.
#include "limit_counter/limit_counter_impl.hpp"

#include <atomic>
#include <random>
#include <variant>

#include <limitcounter/detail/lua_scripts.hpp>

#include "shared/amount.hpp"
#include "shared/batch.hpp"

namespace limitcounter {
namespace {

// A member no other request of any process will use: a random process tag and a counter.
std::string unique_request_member(TimePoint at) {
  static const std::string process_tag = [] {
    std::random_device device;
    return std::to_string(device()) + std::to_string(device());
  }();
  static std::atomic<std::uint64_t> sequence{0};
  return std::to_string(detail::unix_millis(at)) + "-" + process_tag + "-" +
         std::to_string(sequence.fetch_add(1, std::memory_order_relaxed));
}

CapDecision decode_cap(const Reply& reply, std::int64_t max_per_day, Window window) {
  CapDecision decision;
  decision.verdict =
      reply.at(0).as_integer() == 1 ? CapDecision::Verdict::allowed : CapDecision::Verdict::refused;
  decision.used = reply.at(1).as_integer();
  decision.remaining = std::max<std::int64_t>(max_per_day - decision.used, 0);
  decision.window = std::move(window);
  return decision;
}

SlidingDecision decode_sliding(const Reply& reply, const SlidingRequest& request) {
  SlidingDecision decision;
  decision.verdict = reply.at(0).as_integer() == 1 ? SlidingDecision::Verdict::allowed
                                                   : SlidingDecision::Verdict::refused;
  decision.used = reply.at(1).as_integer();
  decision.remaining = std::max<std::int64_t>(request.max - decision.used, 0);
  decision.retry_at =
      TimePoint{std::chrono::milliseconds{reply.at(2).as_integer()}} + request.window;
  return decision;
}

// Runs one take or hit (`run` prepares and sends it) and reports it to `observer`, if any:
// the verdict and latency, or the error, which is thrown on.
template <typename Result, typename Run>
Result observed(LimitObserver* observer, LimiterKind kind, std::string_view name, Run&& run) {
  const TimePoint started = Clock::now();
  try {
    Result result = run();
    if (observer) {
      observer->on_limiter_decision(kind, name, result.allowed(), Clock::now() - started);
    }
    return result;
  } catch (const Error& e) {
    if (observer) {
      observer->on_error(e);
    }
    throw;
  }
}

// A batch as `observed`: each item's verdict with the batch's latency, or its own error.
template <typename Result, typename Request, typename Run>
std::vector<BatchResult<Result>> observed_batch(LimitObserver* observer, LimiterKind kind,
                                                const std::vector<Request>& requests,
                                                std::string Request::*name, Run&& run) {
  const TimePoint started = Clock::now();
  std::vector<BatchResult<Result>> results;
  try {
    results = run();
  } catch (const Error& e) {
    if (observer) {
      observer->on_error(e);
    }
    throw;
  }
  if (observer) {
    const auto latency = Clock::now() - started;
    for (std::size_t i = 0; i < results.size(); ++i) {
      if (const auto* error = std::get_if<Error>(&results[i])) {
        observer->on_error(*error);
      } else {
        observer->on_limiter_decision(kind, requests[i].*name,
                                      std::get<Result>(results[i]).allowed(), latency);
      }
    }
  }
  return results;
}

} // namespace

ScriptCall LimitCounter::Impl::prepare_cap(const CapRequest& request, Window& window,
                                           TimePoint now) const {
  validate_key_part("cap name", request.cap);
  validate_key_part("cap subject", request.subject);
  detail::check_quantity("cap max_per_day", request.max_per_day);
  detail::check_quantity("cap take", request.n, true);
  window = calendar_.window(Period::day, request.at);
  const TimePoint expire_at = window.end + options_.window_grace;
  if (expire_at <= now) {
    throw Error(errc::window_closed, "day " + window.id + " of cap " + request.cap +
                                         " has closed (its key would expire at once)");
  }
  return {&scripts::cap_take,
          {keys_.cap_window(request.cap, window.id)},
          {request.subject, std::to_string(request.n), std::to_string(request.max_per_day),
           std::to_string(detail::unix_millis(expire_at))}};
}

CapDecision LimitCounter::Impl::take_daily_cap(std::string_view cap, std::string_view subject,
                                               std::int64_t max_per_day, TimePoint at,
                                               std::int64_t n) {
  return observed<CapDecision>(options_.observer.get(), LimiterKind::daily_cap, cap, [&] {
    const CapRequest request{std::string(cap), std::string(subject), max_per_day, at, n};
    Window window;
    const ScriptCall call = prepare_cap(request, window, Clock::now());
    return decode_cap(redis_.eval(*call.script, call.keys, call.args), max_per_day,
                      std::move(window));
  });
}

std::vector<BatchResult<CapDecision>>
LimitCounter::Impl::take_daily_cap_many(const std::vector<CapRequest>& requests) {
  return observed_batch<CapDecision>(
      options_.observer.get(), LimiterKind::daily_cap, requests, &CapRequest::cap, [&] {
        const TimePoint now = Clock::now();
        std::vector<Window> windows(requests.size());
        std::vector<ScriptCall> calls;
        calls.reserve(requests.size());
        for (std::size_t i = 0; i < requests.size(); ++i) {
          calls.push_back(prepare_cap(requests[i], windows[i], now));
        }
        return detail::run_batch<CapDecision>(
            redis_, calls, [&](std::size_t i, const Reply& reply) {
              return decode_cap(reply, requests[i].max_per_day, std::move(windows[i]));
            });
      });
}

ScriptCall LimitCounter::Impl::prepare_sliding(const SlidingRequest& request) const {
  validate_key_part("sliding window name", request.limiter);
  validate_key_part("sliding window subject", request.subject);
  detail::check_quantity("sliding window max", request.max, true);
  if (request.window.count() < 1) {
    throw Error(errc::invalid_argument, "sliding window length " +
                                            std::to_string(request.window.count()) +
                                            " ms must be >= 1 ms");
  }
  return {&scripts::sliding_window,
          {keys_.sliding(request.limiter, request.subject)},
          {std::to_string(detail::unix_millis(request.at)), std::to_string(request.window.count()),
           std::to_string(request.max), unique_request_member(request.at)}};
}

SlidingDecision LimitCounter::Impl::hit_sliding_window(std::string_view limiter,
                                                       std::string_view subject, std::int64_t max,
                                                       std::chrono::milliseconds window,
                                                       TimePoint at) {
  return observed<SlidingDecision>(
      options_.observer.get(), LimiterKind::sliding_window, limiter, [&] {
        const SlidingRequest request{std::string(limiter), std::string(subject), max, window, at};
        const ScriptCall call = prepare_sliding(request);
        return decode_sliding(redis_.eval(*call.script, call.keys, call.args), request);
      });
}

std::vector<BatchResult<SlidingDecision>>
LimitCounter::Impl::hit_sliding_window_many(const std::vector<SlidingRequest>& requests) {
  return observed_batch<SlidingDecision>(
      options_.observer.get(), LimiterKind::sliding_window, requests, &SlidingRequest::limiter,
      [&] {
        std::vector<ScriptCall> calls;
        calls.reserve(requests.size());
        for (const auto& request : requests) {
          calls.push_back(prepare_sliding(request));
        }
        return detail::run_batch<SlidingDecision>(
            redis_, calls,
            [&](std::size_t i, const Reply& reply) { return decode_sliding(reply, requests[i]); });
      });
}

} // namespace limitcounter
