// LimitCounter's daily caps and sliding windows.
#include <limitcounter/limit_counter.hpp>

#include <atomic>
#include <random>

#include <limitcounter/detail/lua_scripts.hpp>

#include "domain/amount.hpp"

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

} // namespace

CapDecision LimitCounter::take_daily_cap(std::string_view cap, std::string_view subject,
                                         std::int64_t max_per_day, TimePoint at, std::int64_t n) {
  validate_key_part("cap name", cap);
  validate_key_part("cap subject", subject);
  detail::check_quantity("cap max_per_day", max_per_day);
  detail::check_quantity("cap take", n, true);
  CapDecision decision;
  decision.window = calendar_.window(Period::day, at);
  const TimePoint expire_at = decision.window.end + options_.window_grace;
  if (expire_at <= Clock::now()) {
    throw Error(errc::window_closed,
                "day " + decision.window.id + " of cap " + std::string(cap) + " has closed");
  }
  const Reply reply =
      redis_.eval(scripts::cap_take, {keys_.cap_window(cap, decision.window.id)},
                  {std::string(subject), std::to_string(n), std::to_string(max_per_day),
                   std::to_string(detail::unix_millis(expire_at))});
  decision.allowed = reply.at(0).as_integer() == 1;
  decision.used = reply.at(1).as_integer();
  decision.remaining = std::max<std::int64_t>(max_per_day - decision.used, 0);
  return decision;
}

SlidingDecision LimitCounter::hit_sliding_window(std::string_view limiter, std::string_view subject,
                                                 std::int64_t max, std::chrono::milliseconds window,
                                                 TimePoint at) {
  validate_key_part("sliding window name", limiter);
  validate_key_part("sliding window subject", subject);
  detail::check_quantity("sliding window max", max, true);
  if (window.count() < 1) {
    throw Error(errc::invalid_argument,
                "sliding window length " + std::to_string(window.count()) + " ms must be >= 1 ms");
  }
  const Reply reply =
      redis_.eval(scripts::sliding_window, {keys_.sliding(limiter, subject)},
                  {std::to_string(detail::unix_millis(at)), std::to_string(window.count()),
                   std::to_string(max), unique_request_member(at)});
  SlidingDecision decision;
  decision.allowed = reply.at(0).as_integer() == 1;
  decision.used = reply.at(1).as_integer();
  decision.remaining = std::max<std::int64_t>(max - decision.used, 0);
  decision.retry_at = TimePoint{std::chrono::milliseconds{reply.at(2).as_integer()}} + window;
  return decision;
}

} // namespace limitcounter
