#pragma once
// Calendar: zone-aware period windows. A window is the local-time span that one
// counter key covers; its id goes into the key.

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

namespace limitcounter {

/// The length of a counter window. Weeks are ISO weeks (Monday to Sunday,
/// numbered within the ISO week-year).
enum class Period { minute, hour, day, week, month, year };

/// "minute", "hour", "day", "week", "month" or "year".
std::string_view to_string(Period period) noexcept;

/// The inverse of `to_string`. Throws `Error` (invalid_argument) naming the text for anything else.
Period parse_period(std::string_view text);

using Clock = std::chrono::system_clock;
using TimePoint = Clock::time_point;

/// One window of a period: [start, end) in absolute time.
struct Window {
  /// Local-time id: `202611221530` (minute), `2026112215` (hour), `20261122` (day),
  /// `2026-W47` (ISO week), `202611` (month), `2026` (year).
  std::string id;
  TimePoint start; ///< first instant inside the window
  TimePoint end;   ///< first instant after the window (start of the next one)
};

/// Maps instants to windows in one IANA time zone, e.g. "Asia/Shanghai": a day
/// starts at local midnight, so on DST days it lasts 23 or 25 hours. Cheap to
/// copy (the zone data is shared and immutable); thread-safe.
class Calendar {
public:
  /// Throws `Error` (unknown_time_zone) naming `zone` if the zone database lacks it.
  explicit Calendar(std::string_view zone);

  /// The window of `period` that contains `at`, in this calendar's zone.
  Window window(Period period, TimePoint at) const;

  /// The zone name given at construction.
  const std::string& zone_name() const noexcept { return zone_name_; }

private:
  std::string zone_name_;
  const void* zone_; // const date::time_zone*; the database keeps it alive for the process
};

} // namespace limitcounter
