#pragma once
// Checks on counts and amounts before they reach Redis.

#include <cstdint>
#include <string>
#include <string_view>

#include <limitcounter/error.hpp>
#include <limitcounter/usage.hpp>

namespace limitcounter::detail {

/// Whether 0 <= value <= 2^53 - 1 (or 1 <= value when `positive`): what `check_quantity`
/// accepts, for callers that build its message only when it is needed.
constexpr bool quantity_ok(std::int64_t value, bool positive = false) noexcept {
  return value >= (positive ? 1 : 0) && value <= max_exact_integer;
}

/// Throws unless 0 <= value <= 2^53 - 1 (or 1 <= value when `positive`): negative or zero
/// values are invalid_argument, values past 2^53 - 1 are precision_overflow. The message
/// names `what` and the value.
inline void check_quantity(std::string_view what, std::int64_t value, bool positive = false) {
  if (value < 0 || (positive && value == 0)) {
    throw Error(errc::invalid_argument,
                std::string(what) + " " + std::to_string(value) +
                    (positive ? " must be positive" : " must not be negative"));
  }
  if (value > max_exact_integer) {
    throw Error(errc::precision_overflow,
                std::string(what) + " " + std::to_string(value) +
                    " is 2^53 or more, which Redis Lua numbers cannot hold exactly");
  }
}

/// Unix milliseconds of `at`.
inline std::int64_t unix_millis(TimePoint at) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch()).count();
}

} // namespace limitcounter::detail
