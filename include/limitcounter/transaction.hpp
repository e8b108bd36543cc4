#pragma once
// Transaction: what a limit check is about.

#include <cstdint>
#include <map>
#include <string>

#include <limitcounter/calendar.hpp>

namespace limitcounter {

/// One payment as the limits see it.
struct Transaction {
  /// The idempotency key: the same id is counted once. A key part (`validate_key_part`: at
  /// most 64 bytes of UTF-8, no whitespace, control or invisible characters, braces or '+');
  /// ':' is allowed.
  std::string id;
  /// Named attributes, e.g. {"merchant","m1"}, {"channel","Ali"}, {"transType","Deduct"},
  /// {"dept","cmb"}. Every attribute a rule names must be present. Values are key parts.
  std::map<std::string, std::string> attributes;
  /// Amount in minor units, in [0, 2^53).
  std::int64_t amount = 0;
  /// When it happened: decides the windows it counts in (in the calendar's zone).
  TimePoint time = Clock::now();
};

} // namespace limitcounter
