#include <limitcounter/calendar.hpp>

#include <algorithm>
#include <stdexcept>

#include <date/date.h>
#include <date/iso_week.h>
#include <date/tz.h>

#include <limitcounter/error.hpp>

namespace limitcounter {
namespace {

using date::days;
using date::local_days;
using date::local_seconds;
using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;

const date::time_zone* zone_of(const void* zone) {
  return static_cast<const date::time_zone*>(zone);
}

// The first instant at which the local clock shows `local` or later. A local time shown
// twice (a fall-back at midnight) maps to its first showing; one never shown (a gap at
// midnight) maps to the transition that skipped it. Used for both ends of day and longer
// windows, so that consecutive windows stay contiguous.
TimePoint first_instant_at(const date::time_zone& zone, local_seconds local) {
  const date::local_info info = zone.get_info(local);
  if (info.result == date::local_info::nonexistent) {
    return info.second.begin;
  }
  return TimePoint{local.time_since_epoch() - info.first.offset};
}

void append_digits(std::string& out, unsigned value, int width) {
  char digits[10];
  for (int i = width - 1; i >= 0; --i) {
    digits[i] = static_cast<char>('0' + value % 10);
    value /= 10;
  }
  out.append(digits, static_cast<std::size_t>(width));
}

void append_date(std::string& out, const date::year_month_day& day, bool with_day) {
  append_digits(out, static_cast<unsigned>(static_cast<int>(day.year())), 4);
  append_digits(out, static_cast<unsigned>(day.month()), 2);
  if (with_day) {
    append_digits(out, static_cast<unsigned>(day.day()), 2);
  }
}

} // namespace

std::string_view to_string(Period period) noexcept {
  switch (period) {
  case Period::minute: return "minute";
  case Period::hour: return "hour";
  case Period::day: return "day";
  case Period::week: return "week";
  case Period::month: return "month";
  case Period::year: return "year";
  }
  return "unknown";
}

Period parse_period(std::string_view text) {
  for (const Period period :
       {Period::minute, Period::hour, Period::day, Period::week, Period::month, Period::year}) {
    if (to_string(period) == text) {
      return period;
    }
  }
  throw Error(errc::invalid_argument,
              "period \"" + std::string(text) + "\" is not minute, hour, day, week, month or year");
}

Calendar::Calendar(std::string_view zone) : zone_name_(zone), zone_(nullptr) {
  try {
    zone_ = date::locate_zone(zone_name_);
  } catch (const std::runtime_error&) {
    throw Error(errc::unknown_time_zone,
                "time zone \"" + zone_name_ + "\" is not in the time zone database");
  }
}

Window Calendar::window(Period period, TimePoint at) const {
  const date::time_zone& zone = *zone_of(zone_);
  const date::sys_info offset_period = zone.get_info(date::floor<seconds>(at));
  const local_seconds local{date::floor<seconds>(at).time_since_epoch() + offset_period.offset};
  const local_days local_day = date::floor<days>(local);
  const date::year_month_day day{local_day};

  Window window;
  local_seconds start;
  local_seconds end;
  switch (period) {
  case Period::minute:
  case Period::hour: {
    // Sub-day windows follow the offset in force at `at`, clipped to the span of that
    // offset: across a DST switch they stay contiguous. A local hour shown twice (fall-back)
    // is two windows with one id, so its counter covers both passes (stricter, never looser).
    const bool by_minute = period == Period::minute;
    const local_seconds local_start = by_minute ? local_seconds{date::floor<minutes>(local)}
                                                : local_seconds{date::floor<hours>(local)};
    const seconds length = by_minute ? seconds{minutes{1}} : seconds{hours{1}};
    // In seconds: a zone without further transitions has an offset span ending in year 32767,
    // past what a nanosecond time point holds.
    const date::sys_seconds start_at{local_start.time_since_epoch() - offset_period.offset};
    window.start = TimePoint{std::max(start_at, offset_period.begin).time_since_epoch()};
    window.end = TimePoint{std::min(start_at + length, offset_period.end).time_since_epoch()};
    const auto time_of_day = date::hh_mm_ss<seconds>{local_start - local_day};
    window.id.reserve(12);
    append_date(window.id, day, true);
    append_digits(window.id, static_cast<unsigned>(time_of_day.hours().count()), 2);
    if (by_minute) {
      append_digits(window.id, static_cast<unsigned>(time_of_day.minutes().count()), 2);
    }
    return window;
  }
  case Period::day:
    start = local_day;
    end = local_day + days{1};
    window.id.reserve(8);
    append_date(window.id, day, true);
    break;
  case Period::week: {
    const iso_week::year_weeknum_weekday week{local_day};
    const date::sys_days monday_as_date{
        iso_week::year_weeknum_weekday{week.year(), week.weeknum(), iso_week::mon}};
    const local_days monday{monday_as_date.time_since_epoch()};
    start = monday;
    end = monday + days{7};
    window.id.reserve(8);
    append_digits(window.id, static_cast<unsigned>(static_cast<int>(week.year())), 4);
    window.id += "-W";
    append_digits(window.id, static_cast<unsigned>(week.weeknum()), 2);
    break;
  }
  case Period::month: {
    const auto first = day.year() / day.month() / 1;
    start = local_days{first};
    end = local_days{first + date::months{1}};
    window.id.reserve(6);
    append_date(window.id, day, false);
    break;
  }
  case Period::year:
    start = local_days{day.year() / 1 / 1};
    end = local_days{(day.year() + date::years{1}) / 1 / 1};
    window.id.reserve(4);
    append_digits(window.id, static_cast<unsigned>(static_cast<int>(day.year())), 4);
    break;
  }
  window.start = first_instant_at(zone, start);
  window.end = first_instant_at(zone, end);
  return window;
}

} // namespace limitcounter
