#include <limitcounter/calendar.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include <date/date.h>
#include <date/iso_week.h>
#include <date/ptz.h>
#include <date/tz.h>

#include <limitcounter/error.hpp>

namespace limitcounter {
namespace {

using date::days;
using date::local_days;
using date::local_seconds;
using date::sys_seconds;
using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;

// Where the date library reads zone files (it is built with USE_OS_TZDB).
constexpr const char* zone_directory = "/usr/share/zoneinfo/";

// The POSIX TZ rule in the footer of a TZif file (version 2 and later), e.g.
// "EST5EDT,M3.2.0,M11.1.0": it gives every transition after the last one the file lists.
// Null when the file has none, the zone keeps one offset (no ',': no DST), or the rule is one
// date/ptz.h cannot read (negative transition hours, as in America/Nuuk): such zones keep the
// offset of their last listed transition.
std::shared_ptr<const Posix::time_zone> posix_rule_of(const std::string& zone_name) {
  std::ifstream file(zone_directory + zone_name, std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (data.size() < 2 || data.compare(0, 4, "TZif") != 0 || data.back() != '\n') {
    return nullptr;
  }
  const auto start = data.rfind('\n', data.size() - 2);
  if (start == std::string::npos) {
    return nullptr;
  }
  const std::string rule = data.substr(start + 1, data.size() - start - 2);
  if (rule.find(',') == std::string::npos) {
    return nullptr;
  }
  try {
    return std::make_shared<const Posix::time_zone>(rule);
  } catch (const std::runtime_error&) {
    return nullptr;
  }
}

// A zone as the calendar sees it: the transitions its file lists, then its POSIX rule.
class Zone {
public:
  Zone(const void* zone, const void* rule)
      : zone_(*static_cast<const date::time_zone*>(zone)),
        rule_(static_cast<const Posix::time_zone*>(rule)) {}

  // The offset span around `instant`. The file's last span is open-ended (it ends in the
  // year 32767); inside it the rule's spans apply, starting no earlier than the last listed
  // transition. Without this, Debian's files (listing transitions up to 2037) would leave
  // every later instant on the offset of 2037's last switch: no DST from 2038 on.
  date::sys_info get_info(sys_seconds instant) const {
    date::sys_info listed = zone_.get_info(instant);
    if (rule_ == nullptr || listed.end < open_ended) {
      return listed;
    }
    date::sys_info ruled = rule_->get_info(instant);
    ruled.begin = std::max(ruled.begin, listed.begin);
    return ruled;
  }

private:
  static constexpr sys_seconds open_ended{date::sys_days{date::year{10000} / 1 / 1}};
  const date::time_zone& zone_;
  const Posix::time_zone* rule_;
};

local_seconds local_at(sys_seconds instant, seconds offset) {
  return local_seconds{instant.time_since_epoch() + offset};
}

sys_seconds instant_of(local_seconds local, seconds offset) {
  return sys_seconds{local.time_since_epoch() - offset};
}

// Offset spans are computed in seconds because a zone's last span ends in the year 32767,
// far past what a nanosecond time point holds; only the final bounds are converted, and
// they saturate instead of overflowing for instants near the ends of the clock's range.
TimePoint to_time_point(sys_seconds instant) {
  constexpr seconds latest =
      std::chrono::duration_cast<seconds>(TimePoint::max().time_since_epoch());
  constexpr seconds earliest =
      std::chrono::duration_cast<seconds>(TimePoint::min().time_since_epoch()) + seconds{1};
  if (instant.time_since_epoch() >= latest) {
    return TimePoint::max();
  }
  if (instant.time_since_epoch() <= earliest) {
    return TimePoint::min();
  }
  return TimePoint{std::chrono::duration_cast<TimePoint::duration>(instant.time_since_epoch())};
}

// The window in absolute time is the longest uninterrupted stretch around `at` during which
// the local clock stays inside [local_start, local_end). Within one offset span the clock is
// linear, so the stretch only needs widening when it touches a span boundary, and then only
// if the clock on the other side of the switch is still inside the local window.
//
// This one rule gives every DST behaviour the calendar promises:
// - a local midnight that never happens (a spring-forward at midnight) starts the day at the
//   switch itself, the earliest instant of that local day;
// - a repeated local midnight (a fall-back at midnight) keeps the repeated hour in the day
//   before, so the day ends at the second midnight and lasts 25 hours;
// - a repeated local hour (02:00-03:00 in Europe/Berlin in October) is one stretch of two
//   hours, so its id, start and end describe one window and one counter;
// - a repeated local minute is two stretches separated by the rest of the repeated hour: the
//   id repeats for two windows (see the header).
struct Stretch {
  sys_seconds start;
  sys_seconds end;
};

Stretch stretch_around(const Zone& zone, const date::sys_info& here, local_seconds local_start,
                       local_seconds local_end) {
  Stretch stretch{instant_of(local_start, here.offset), instant_of(local_end, here.offset)};

  for (date::sys_info span = here; stretch.start <= span.begin;) {
    stretch.start = span.begin;
    const date::sys_info before = zone.get_info(span.begin - seconds{1});
    // Just before the switch the clock approached this local time from below.
    const local_seconds approached = local_at(span.begin, before.offset);
    if (approached <= local_start || approached > local_end) {
      break;
    }
    stretch.start = instant_of(local_start, before.offset);
    span = before;
  }

  for (date::sys_info span = here; stretch.end >= span.end;) {
    stretch.end = span.end;
    const date::sys_info after = zone.get_info(span.end);
    const local_seconds shown = local_at(span.end, after.offset);
    if (shown < local_start || shown >= local_end) {
      break;
    }
    stretch.end = instant_of(local_end, after.offset);
    span = after;
  }
  return stretch;
}

// Ids are at most 12 characters, inside std::string's small buffer: building one allocates
// nothing.
class IdBuilder {
public:
  void digits(long long value, int width) {
    // Years of a nanosecond clock lie in 1677..2262; the sign branch only keeps this total.
    if (value < 0) {
      buffer_[size_++] = '-';
      value = -value;
    }
    for (int i = width - 1; i >= 0; --i) {
      buffer_[size_ + static_cast<std::size_t>(i)] = static_cast<char>('0' + value % 10);
      value /= 10;
    }
    size_ += static_cast<std::size_t>(width);
  }

  void text(const char* literal) {
    while (*literal != '\0') {
      buffer_[size_++] = *literal++;
    }
  }

  std::string str() const { return std::string(buffer_, size_); }

private:
  char buffer_[32] = {};
  std::size_t size_ = 0;
};

void append_date(IdBuilder& id, const date::year_month_day& day) {
  id.digits(static_cast<int>(day.year()), 4);
  id.digits(static_cast<unsigned>(day.month()), 2);
  id.digits(static_cast<unsigned>(day.day()), 2);
}

// Ids of calendars, from 1 (0: no calendar). A copy keeps its calendar's id: it has the same
// zone and rule.
std::atomic<std::uint64_t> next_calendar_id{0};

struct CachedWindow {
  std::uint64_t calendar = 0;
  Window window;
};
// The last window of each period computed on this thread (by `Calendar::window`).
thread_local std::array<CachedWindow, 6> cached_windows;

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

Calendar::Calendar(std::string_view zone)
    : zone_name_(zone), id_(next_calendar_id.fetch_add(1) + 1), zone_(nullptr) {
  const date::time_zone* located = nullptr;
  try {
    located = date::locate_zone(zone_name_);
  } catch (const std::runtime_error&) {
    throw Error(errc::unknown_time_zone,
                "time zone \"" + zone_name_ + "\" is not in the time zone database");
  }
  zone_ = located;
  rule_ = posix_rule_of(located->name());
}

Window Calendar::window(Period period, TimePoint at) const {
  // A window holds for every instant inside it: a decision in the window this thread saw last
  // (nearly every one) costs two comparisons and a copy instead of a zone lookup. The cache is
  // per thread, so it needs no lock; keyed by the calendar's id, so it never answers for
  // another zone.
  CachedWindow& cached = cached_windows[static_cast<std::size_t>(period)];
  if (cached.calendar != id_ || at < cached.window.start || at >= cached.window.end) {
    cached.window = compute_window(period, at);
    cached.calendar = id_;
  }
  return cached.window;
}

Window Calendar::compute_window(Period period, TimePoint at) const {
  const Zone zone(zone_, rule_.get());
  const sys_seconds at_second = date::floor<seconds>(at);
  // The instant's own offset: an ambiguous local time belongs to the pass it happens in.
  const date::sys_info here = zone.get_info(at_second);
  const local_seconds local = local_at(at_second, here.offset);
  const local_days local_day = date::floor<days>(local);
  const date::year_month_day day{local_day};

  IdBuilder id;
  local_seconds local_start;
  local_seconds local_end;
  switch (period) {
  case Period::minute:
    local_start = date::floor<minutes>(local);
    local_end = local_start + minutes{1};
    break;
  case Period::hour:
    local_start = date::floor<hours>(local);
    local_end = local_start + hours{1};
    break;
  case Period::day:
    local_start = local_day;
    local_end = local_day + days{1};
    append_date(id, day);
    break;
  case Period::week: {
    const iso_week::year_weeknum_weekday week{local_day};
    const local_days monday{
        iso_week::year_weeknum_weekday{week.year(), week.weeknum(), iso_week::mon}};
    local_start = monday;
    local_end = monday + days{7};
    id.digits(static_cast<int>(week.year()), 4);
    id.text("-W");
    id.digits(static_cast<unsigned>(week.weeknum()), 2);
    break;
  }
  case Period::month: {
    const date::year_month first = day.year() / day.month();
    local_start = local_days{first / 1};
    local_end = local_days{(first + date::months{1}) / 1};
    id.digits(static_cast<int>(day.year()), 4);
    id.digits(static_cast<unsigned>(day.month()), 2);
    break;
  }
  case Period::year:
    local_start = local_days{day.year() / 1 / 1};
    local_end = local_days{(day.year() + date::years{1}) / 1 / 1};
    id.digits(static_cast<int>(day.year()), 4);
    break;
  }
  if (period == Period::minute || period == Period::hour) {
    const seconds since_midnight = local_start - local_day;
    append_date(id, day);
    id.digits(since_midnight.count() / 3600, 2);
    if (period == Period::minute) {
      id.digits(since_midnight.count() / 60 % 60, 2);
    }
  }

  const Stretch stretch = stretch_around(zone, here, local_start, local_end);
  return Window{id.str(), to_time_point(stretch.start), to_time_point(stretch.end)};
}

} // namespace limitcounter
