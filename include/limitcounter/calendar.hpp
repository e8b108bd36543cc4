#pragma once
// Calendar: zone-aware period windows. A window is the local-time span that one
// counter key covers; its id goes into the key.

#include <chrono>
#include <cstdint>
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
///
/// A window is the longest uninterrupted stretch of absolute time around the instant during
/// which the zone's local clock stays inside one local minute, hour, day, ISO week, month or
/// year. Consecutive windows are contiguous (one's `end` is the next one's `start`) and every
/// instant lies in exactly one window. Around DST switches and other offset changes:
/// - a day, week, month or year that begins at a local midnight which never happens (a
///   spring-forward at midnight, e.g. Asia/Beirut) starts at the switch itself;
/// - days of a spring-forward last 23 hours, days of a fall-back 25 hours; a local hour shown
///   twice by a fall-back at midnight belongs to the day it shows (the earlier day);
/// - the local hour skipped by a spring-forward has no window: the hour before ends at the
///   switch and the next window (`...03` in Europe/Berlin) starts there;
/// - a local hour shown twice by a fall-back (02:00-03:00 on 2026-10-25 in Europe/Berlin) is
///   ONE window of two hours: id `2026102502`, start at the first 02:00 (00:00 UTC), end at
///   03:00 after the second pass (02:00 UTC). Its counter covers both passes, which is
///   stricter than per real hour, never looser, and its expiry (end + grace) covers them too;
/// - a local minute shown twice cannot be one window (the rest of the repeated hour lies
///   between its passes), so it is two one-minute windows that share one id and therefore one
///   counter. The same happens to hours in the rare zones whose fall-back exceeds an hour
///   (Antarctica/Troll falls back two hours). A counter that covers two windows of one id
///   should extend its expiry on the later window (PEXPIREAT ... GT), not only set it once.
///
/// Zone data comes from the system's zone files (/usr/share/zoneinfo) through Howard
/// Hinnant's date library. The files list transitions explicitly up to a year (Debian's up
/// to 2037) and end with the zone's POSIX TZ rule (e.g. "EST5EDT,M3.2.0,M11.1.0"), which
/// this calendar applies after the last listed transition (with date/ptz.h), so DST keeps
/// switching in every later year: America/New_York at 2038-06-08T04:30Z is 00:30 EDT, day
/// `20380608`. The one exception: a rule date/ptz.h cannot read (transition hours below 0
/// or above 24, as in America/Nuuk and America/Scoresbysund) is not applied; such a zone
/// keeps the offset of its last listed transition.
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
  Window compute_window(Period period, TimePoint at) const;

  std::string zone_name_;
  std::uint64_t id_; // this calendar's (and its copies') own: keys the per-thread window cache
  const void* zone_; // const date::time_zone*; the database keeps it alive for the process
  std::shared_ptr<const void> rule_; // const Posix::time_zone*: the rule after the listed
                                     // transitions, or null (no DST, or a rule not read)
};

} // namespace limitcounter
