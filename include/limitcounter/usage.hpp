#pragma once
// Usage: what a counter holds in one window.

#include <cstdint>

#include <limitcounter/calendar.hpp>

namespace limitcounter {

/// Largest amount or total the library stores: 2^53 - 1. Lua numbers are doubles, so
/// anything larger could be rounded; it is refused before anything is written.
inline constexpr std::int64_t max_exact_integer = (std::int64_t{1} << 53) - 1;

/// A count of transactions and their summed amount (minor units, e.g. cents).
struct Usage {
  std::int64_t count = 0;  ///< transactions
  std::int64_t amount = 0; ///< their summed amount, in minor units

  /// Both count and amount equal.
  friend bool operator==(const Usage& a, const Usage& b) {
    return a.count == b.count && a.amount == b.amount;
  }
  /// Not `==`.
  friend bool operator!=(const Usage& a, const Usage& b) { return !(a == b); }
};

/// The usage of one dimension in one window.
struct WindowUsage {
  Period period; ///< the window's length
  Window window; ///< which window (id, start, end)
  Usage usage;   ///< what the counter holds in it
};

} // namespace limitcounter
