#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <date/date.h>
#include <date/tz.h>

#include <limitcounter/calendar.hpp>
#include <limitcounter/error.hpp>

using namespace std::chrono_literals;
using date::days;
using limitcounter::Calendar;
using limitcounter::Period;
using limitcounter::TimePoint;
using limitcounter::Window;

namespace {

constexpr Period all_periods[] = {Period::minute, Period::hour,  Period::day,
                                  Period::week,   Period::month, Period::year};

TimePoint utc(date::year_month_day day, std::chrono::milliseconds time_of_day = 0ms) {
  return date::sys_days{day} + time_of_day;
}

// The instant a local wall-clock time names. Throws (date's own exceptions) if that local
// time is skipped or repeated in the zone, so the tests below only use it for unique times.
TimePoint local(const char* zone, date::year_month_day day, std::chrono::milliseconds time = 0ms) {
  return date::make_zoned(zone, date::local_days{day} + time).get_sys_time();
}

// Checks that consecutive windows from `from` until `to` are contiguous, non-empty, change
// their id at every step, and hold every instant between their bounds; returns the ids seen.
std::vector<std::string> walk(const Calendar& zone, Period period, TimePoint from, TimePoint to) {
  std::vector<std::string> ids;
  Window current = zone.window(period, from);
  REQUIRE(current.start <= from);
  REQUIRE(from < current.end);
  ids.push_back(current.id);
  while (current.end < to) {
    const Window next = zone.window(period, current.end);
    INFO(current.id << " then " << next.id);
    REQUIRE(next.start == current.end);
    REQUIRE(next.start < next.end);
    REQUIRE(next.id != current.id);
    const Window last_instant = zone.window(period, next.end - 1ns);
    REQUIRE(last_instant.id == next.id);
    REQUIRE(last_instant.start == next.start);
    REQUIRE(last_instant.end == next.end);
    const TimePoint middle = next.start + (next.end - next.start) / 2;
    const Window middle_window = zone.window(period, middle);
    REQUIRE(middle_window.id == next.id);
    REQUIRE(middle_window.start == next.start);
    ids.push_back(next.id);
    current = next;
  }
  return ids;
}

} // namespace

TEST_CASE("window ids and bounds of every period in Asia/Shanghai", "[calendar]") {
  const Calendar shanghai("Asia/Shanghai");
  const TimePoint at = local("Asia/Shanghai", date::year{2026} / 11 / 22, 15h + 30min + 42s);
  const struct {
    Period period;
    const char* id;
    TimePoint start;
    TimePoint end;
  } expected[] = {
      {Period::minute, "202611221530", at - 42s, at + 18s},
      {Period::hour, "2026112215", at - 30min - 42s, at + 29min + 18s},
      {Period::day, "20261122", local("Asia/Shanghai", date::year{2026} / 11 / 22),
       local("Asia/Shanghai", date::year{2026} / 11 / 23)},
      {Period::week, "2026-W47", local("Asia/Shanghai", date::year{2026} / 11 / 16),
       local("Asia/Shanghai", date::year{2026} / 11 / 23)},
      {Period::month, "202611", local("Asia/Shanghai", date::year{2026} / 11 / 1),
       local("Asia/Shanghai", date::year{2026} / 12 / 1)},
      {Period::year, "2026", local("Asia/Shanghai", date::year{2026} / 1 / 1),
       local("Asia/Shanghai", date::year{2027} / 1 / 1)},
  };
  for (const auto& e : expected) {
    INFO(limitcounter::to_string(e.period));
    const Window window = shanghai.window(e.period, at);
    CHECK(window.id == e.id);
    CHECK(window.start == e.start);
    CHECK(window.end == e.end);
  }
  // Shanghai is UTC+8 all year: local midnight is 16:00 UTC the day before.
  CHECK(shanghai.window(Period::day, at).start == utc(date::year{2026} / 11 / 21, 16h));
  CHECK(shanghai.zone_name() == "Asia/Shanghai");
}

TEST_CASE("16:30 UTC on 2021-11-11 is Shanghai's 2021-11-12", "[calendar]") {
  const Calendar shanghai("Asia/Shanghai");
  const TimePoint at = utc(date::year{2021} / 11 / 11, 16h + 30min);
  CHECK(shanghai.window(Period::day, at).id == "20211112");
  CHECK(Calendar("UTC").window(Period::day, at).id == "20211111");
  CHECK(shanghai.window(Period::day, at).start == utc(date::year{2021} / 11 / 11, 16h));
  CHECK(shanghai.window(Period::week, at).id == "2021-W45");
  CHECK(shanghai.window(Period::month, at).id == "202111");
}

TEST_CASE("ISO week-years at their edges", "[calendar]") {
  const Calendar zone("UTC");
  CHECK(zone.window(Period::week, utc(date::year{2021} / 1 / 3)).id == "2020-W53");
  CHECK(zone.window(Period::week, utc(date::year{2021} / 1 / 4)).id == "2021-W01");
  CHECK(zone.window(Period::week, utc(date::year{2024} / 12 / 30)).id == "2025-W01");
  CHECK(zone.window(Period::week, utc(date::year{2024} / 12 / 29)).id == "2024-W52");
  const Window w53 = zone.window(Period::week, utc(date::year{2021} / 1 / 3, 23h));
  CHECK(w53.start == utc(date::year{2020} / 12 / 28)); // a Monday
  CHECK(w53.end == utc(date::year{2021} / 1 / 4));

  // The week follows the local date: 16:00 UTC on Sunday 2024-12-29 is already Monday
  // 2024-12-30 in Shanghai, the first day of 2025-W01.
  const Calendar shanghai("Asia/Shanghai");
  const TimePoint sunday_utc = utc(date::year{2024} / 12 / 29, 16h);
  CHECK(zone.window(Period::week, sunday_utc).id == "2024-W52");
  CHECK(shanghai.window(Period::week, sunday_utc).id == "2025-W01");
  CHECK(shanghai.window(Period::week, sunday_utc).start == sunday_utc);
}

TEST_CASE("month ends, leap days and year ends", "[calendar]") {
  const Calendar zone("Asia/Shanghai");
  const auto jan31 = local("Asia/Shanghai", date::year{2027} / 1 / 31, 23h + 59min);
  CHECK(zone.window(Period::month, jan31).id == "202701");
  CHECK(zone.window(Period::month, jan31).end == local("Asia/Shanghai", date::year{2027} / 2 / 1));
  CHECK(zone.window(Period::day, jan31).id == "20270131");
  const Window feb1 = zone.window(Period::day, jan31 + 1min);
  CHECK(feb1.id == "20270201");
  CHECK(feb1.start == zone.window(Period::day, jan31).end);
  CHECK(zone.window(Period::month, jan31 + 1min).id == "202702");

  for (const int year : {2024, 2028}) {
    INFO(year);
    const auto feb28 = local("Asia/Shanghai", date::year{year} / 2 / 28, 12h);
    const auto leap = local("Asia/Shanghai", date::year{year} / 2 / 29, 12h);
    const Window leap_day = zone.window(Period::day, leap);
    CHECK(leap_day.id == std::to_string(year) + "0229");
    CHECK(leap_day.start == zone.window(Period::day, feb28).end);
    CHECK(leap_day.end - leap_day.start == days{1});
    CHECK(zone.window(Period::day, leap_day.end).id == std::to_string(year) + "0301");
    const Window february = zone.window(Period::month, leap);
    CHECK(february.id == std::to_string(year) + "02");
    CHECK(february.end - february.start == days{29});
    CHECK(february.end == local("Asia/Shanghai", date::year{year} / 3 / 1));
    const Window leap_year = zone.window(Period::year, leap);
    CHECK(leap_year.end - leap_year.start == days{366});
  }
  const auto feb2027 = local("Asia/Shanghai", date::year{2027} / 2 / 10);
  CHECK(zone.window(Period::month, feb2027).end - zone.window(Period::month, feb2027).start ==
        days{28});
  CHECK(zone.window(Period::day, local("Asia/Shanghai", date::year{2027} / 2 / 28, 23h)).end ==
        local("Asia/Shanghai", date::year{2027} / 3 / 1));

  const auto new_year_eve =
      local("Asia/Shanghai", date::year{2026} / 12 / 31, 23h + 59min + 59s + 999ms);
  const auto new_year = new_year_eve + 1ms;
  CHECK(zone.window(Period::year, new_year_eve).id == "2026");
  CHECK(zone.window(Period::year, new_year).id == "2027");
  CHECK(zone.window(Period::year, new_year_eve).end == new_year);
  CHECK(zone.window(Period::month, new_year_eve).id == "202612");
  CHECK(zone.window(Period::month, new_year).id == "202701");
  CHECK(zone.window(Period::hour, new_year_eve).id == "2026123123");
  CHECK(zone.window(Period::hour, new_year).id == "2027010100");
  CHECK(zone.window(Period::minute, new_year_eve).id == "202612312359");
  CHECK(zone.window(Period::minute, new_year).id == "202701010000");
}

TEST_CASE("23:59:59.999 and 00:00:00.000 local are in different days", "[calendar]") {
  for (const char* name : {"Asia/Shanghai", "Europe/Berlin", "America/New_York", "UTC"}) {
    INFO(name);
    const Calendar zone(name);
    const TimePoint last = local(name, date::year{2026} / 6 / 14, 23h + 59min + 59s + 999ms);
    const TimePoint first = local(name, date::year{2026} / 6 / 15);
    REQUIRE(first - last == 1ms);
    const Window before = zone.window(Period::day, last);
    const Window after = zone.window(Period::day, first);
    CHECK(before.id == "20260614");
    CHECK(after.id == "20260615");
    CHECK(before.end == first);
    CHECK(after.start == first);
    CHECK(last < before.end);
  }
}

TEST_CASE("days of 23 and 25 hours on DST switches", "[calendar]") {
  const struct {
    const char* zone;
    date::year_month_day day;
    std::chrono::hours length;
  } cases[] = {
      {"Europe/Berlin", date::year{2026} / 3 / 29, 23h},
      {"Europe/Berlin", date::year{2026} / 10 / 25, 25h},
      {"America/New_York", date::year{2026} / 3 / 8, 23h},
      {"America/New_York", date::year{2026} / 11 / 1, 25h},
  };
  for (const auto& c : cases) {
    INFO(c.zone << " " << c.day);
    const Calendar zone(c.zone);
    const Window day = zone.window(Period::day, local(c.zone, c.day, 12h));
    CHECK(day.end - day.start == c.length);
    CHECK(day.start == local(c.zone, c.day));
    CHECK(day.end == local(c.zone, date::sys_days{c.day} + days{1}));
    CHECK(zone.window(Period::day, day.end).start == day.end);
    CHECK(zone.window(Period::day, day.start - 1ns).end == day.start);
  }
  // The weeks, month and year around them absorb the hour gained or lost.
  const Calendar berlin("Europe/Berlin");
  const Window march =
      berlin.window(Period::month, local("Europe/Berlin", date::year{2026} / 3 / 5));
  CHECK(march.end - march.start == days{31} - 1h);
  const Window year = berlin.window(Period::year, local("Europe/Berlin", date::year{2026} / 3 / 5));
  CHECK(year.end - year.start == days{365});
}

TEST_CASE("local midnights that never happen or happen twice", "[calendar]") {
  SECTION("Asia/Beirut springs forward at midnight") {
    // 2026-03-29 00:00 EET (22:00 UTC the day before) jumps to 01:00 EEST.
    const Calendar beirut("Asia/Beirut");
    const TimePoint switch_at = utc(date::year{2026} / 3 / 28, 22h);
    const Window day = beirut.window(Period::day, switch_at + 5h);
    CHECK(day.id == "20260329");
    CHECK(day.start == switch_at);
    CHECK(day.end - day.start == 23h);
    const Window eve = beirut.window(Period::day, switch_at - 1ns);
    CHECK(eve.id == "20260328");
    CHECK(eve.end == switch_at);
    CHECK(eve.end - eve.start == 24h);
    CHECK(beirut.window(Period::hour, switch_at).id == "2026032901");
    CHECK(beirut.window(Period::hour, switch_at).start == switch_at);
  }
  SECTION("America/Santiago springs forward and falls back at midnight") {
    const Calendar santiago("America/Santiago");
    // 2026-09-06 00:00 -04 (04:00 UTC) jumps to 01:00 -03: Sunday starts at the switch.
    const TimePoint spring = utc(date::year{2026} / 9 / 6, 4h);
    const Window sunday = santiago.window(Period::day, spring + 10h);
    CHECK(sunday.id == "20260906");
    CHECK(sunday.start == spring);
    CHECK(sunday.end - sunday.start == 23h);
    // The ISO week 2026-W36 (Monday 08-31 to Sunday 09-06) ends at Sunday's start + 23 h.
    const Window week = santiago.window(Period::week, spring);
    CHECK(week.id == "2026-W36");
    CHECK(week.end == sunday.end);
    CHECK(week.end - week.start == days{7} - 1h);

    // 2026-04-05 00:00 -03 (03:00 UTC) falls back to Saturday 23:00 -04: Saturday's last
    // hour is shown twice and Saturday lasts 25 hours, Sunday starts at 04:00 UTC.
    const TimePoint fall = utc(date::year{2026} / 4 / 5, 3h);
    const Window saturday = santiago.window(Period::day, fall - 1h);
    CHECK(saturday.id == "20260404");
    CHECK(saturday.end - saturday.start == 25h);
    CHECK(saturday.end == fall + 1h);
    CHECK(santiago.window(Period::day, fall + 30min).id == "20260404");
    CHECK(santiago.window(Period::day, fall + 1h).id == "20260405");
    CHECK(santiago.window(Period::day, fall + 1h).start == fall + 1h);
    // The repeated 23:00 hour is one two-hour window.
    const Window late_hour = santiago.window(Period::hour, fall + 30min);
    CHECK(late_hour.id == "2026040423");
    CHECK(late_hour.start == fall - 1h);
    CHECK(late_hour.end == fall + 1h);
  }
}

TEST_CASE("hours across the spring-forward gap and the fall-back overlap", "[calendar]") {
  const Calendar berlin("Europe/Berlin");
  // 2026-03-29: 02:00 CET jumps to 03:00 CEST at 01:00 UTC. Local 02:xx never happens.
  const Window before_gap = berlin.window(Period::hour, utc(date::year{2026} / 3 / 29, 0h + 30min));
  CHECK(before_gap.id == "2026032901");
  CHECK(before_gap.start == utc(date::year{2026} / 3 / 29, 0h));
  CHECK(before_gap.end == utc(date::year{2026} / 3 / 29, 1h));
  const Window after_gap = berlin.window(Period::hour, utc(date::year{2026} / 3 / 29, 1h));
  CHECK(after_gap.id == "2026032903");
  CHECK(after_gap.start == before_gap.end);
  CHECK(after_gap.end - after_gap.start == 1h);
  CHECK(berlin.window(Period::minute, before_gap.end - 1ns).id == "202603290159");
  CHECK(berlin.window(Period::minute, before_gap.end).id == "202603290300");

  // 2026-10-25: 03:00 CEST falls back to 02:00 CET at 01:00 UTC, so local 02:xx happens
  // twice. The repeated hour is one window of two hours: one id, one counter, and bounds
  // that cover both passes.
  const TimePoint fall = utc(date::year{2026} / 10 / 25, 1h);
  for (const TimePoint at :
       {fall - 1h, fall - 30min, fall - 1ns, fall, fall + 30min, fall + 1h - 1ns}) {
    const Window repeated = berlin.window(Period::hour, at);
    CHECK(repeated.id == "2026102502");
    CHECK(repeated.start == fall - 1h); // the first 02:00 (CEST)
    CHECK(repeated.end == fall + 1h);   // 03:00 CET
  }
  const Window one = berlin.window(Period::hour, fall - 1h - 1ns);
  CHECK(one.id == "2026102501");
  CHECK(one.end == fall - 1h);
  CHECK(one.end - one.start == 1h);
  const Window three = berlin.window(Period::hour, fall + 1h);
  CHECK(three.id == "2026102503");
  CHECK(three.start == fall + 1h);
  CHECK(three.end - three.start == 1h);

  // A repeated minute cannot be one window: each pass is its own one-minute window, and the
  // two share an id.
  const Window first_minute = berlin.window(Period::minute, fall - 30min + 5s);
  const Window second_minute = berlin.window(Period::minute, fall + 30min + 5s);
  CHECK(first_minute.id == "202610250230");
  CHECK(second_minute.id == "202610250230");
  CHECK(first_minute.start == fall - 30min);
  CHECK(second_minute.start == fall + 30min);
  CHECK(first_minute.end - first_minute.start == 1min);
  CHECK(second_minute.end - second_minute.start == 1min);
  CHECK(berlin.window(Period::minute, fall - 1ns).id == "202610250259");
  CHECK(berlin.window(Period::minute, fall).id == "202610250200");
  CHECK(berlin.window(Period::minute, fall).start == fall);

  SECTION("America/New_York") {
    const Calendar new_york("America/New_York");
    // 2026-11-01: 02:00 EDT falls back to 01:00 EST at 06:00 UTC.
    const TimePoint back = utc(date::year{2026} / 11 / 1, 6h);
    const Window repeated = new_york.window(Period::hour, back + 10min);
    CHECK(repeated.id == "2026110101");
    CHECK(repeated.start == back - 1h);
    CHECK(repeated.end == back + 1h);
    // 2026-03-08: 02:00 EST jumps to 03:00 EDT at 07:00 UTC.
    const TimePoint forward = utc(date::year{2026} / 3 / 8, 7h);
    CHECK(new_york.window(Period::hour, forward - 1ns).id == "2026030801");
    CHECK(new_york.window(Period::hour, forward).id == "2026030803");
    CHECK(new_york.window(Period::hour, forward).start == forward);
  }
  SECTION("a half-hour fall-back (Australia/Lord_Howe)") {
    // 2026-04-05 02:00 +11 falls back to 01:30 +1030 at 15:00 UTC the day before: local
    // 01:30-02:00 repeats, so the 01 hour lasts an hour and a half.
    const Calendar lord_howe("Australia/Lord_Howe");
    const TimePoint back = utc(date::year{2026} / 4 / 4, 15h);
    const Window longer = lord_howe.window(Period::hour, back + 10min);
    CHECK(longer.id == "2026040501");
    CHECK(longer.start == back - 1h);
    CHECK(longer.end == back + 30min);
    CHECK(lord_howe.window(Period::hour, longer.end).id == "2026040502");
  }
  SECTION("a two-hour fall-back repeats an hour id in two windows (Antarctica/Troll)") {
    // 2026-10-25 03:00 +02 falls back to 01:00 +00 at 01:00 UTC: local 01:xx and 02:xx both
    // repeat, and the two passes of 02:xx are an hour apart.
    const Calendar troll("Antarctica/Troll");
    const TimePoint back = utc(date::year{2026} / 10 / 25, 1h);
    const Window first = troll.window(Period::hour, back - 30min);
    const Window second = troll.window(Period::hour, back + 1h + 30min);
    CHECK(first.id == "2026102502");
    CHECK(second.id == "2026102502");
    CHECK(first.end == back);
    CHECK(second.start == back + 1h);
    const Window between = troll.window(Period::hour, back + 30min);
    CHECK(between.id == "2026102501");
    CHECK(between.start == back);
    CHECK(between.end == second.start);
  }
}

TEST_CASE("consecutive windows are contiguous and contain their instants", "[calendar]") {
  const TimePoint from = utc(date::year{2026} / 1 / 1);
  const TimePoint to = utc(date::year{2027} / 1 / 1);
  SECTION("hours, days and longer over a year in DST zones of both hemispheres") {
    for (const char* name : {"Europe/Berlin", "America/New_York", "America/Santiago", "Asia/Beirut",
                             "Australia/Lord_Howe", "Asia/Shanghai"}) {
      const Calendar zone(name);
      for (const Period period : all_periods) {
        if (period == Period::minute) {
          continue;
        }
        INFO(name << " " << limitcounter::to_string(period));
        const std::vector<std::string> ids = walk(zone, period, from, to);
        // Repeated local hours are merged, so no id comes back in these zones.
        CHECK(std::set<std::string>(ids.begin(), ids.end()).size() == ids.size());
      }
    }
  }
  SECTION("minutes over a year in Europe/Berlin") {
    const Calendar berlin("Europe/Berlin");
    const std::vector<std::string> ids = walk(berlin, Period::minute, from, to);
    std::map<std::string, int> seen;
    for (const std::string& id : ids) {
      ++seen[id];
    }
    std::vector<std::string> repeated;
    for (const auto& [id, count] : seen) {
      if (count > 1) {
        CHECK(count == 2);
        repeated.push_back(id);
      }
    }
    // Only the 60 minutes of the fall-back hour come back, each once.
    REQUIRE(repeated.size() == 60);
    CHECK(repeated.front() == "202610250200");
    CHECK(repeated.back() == "202610250259");
    // 365 days of 1440 minutes, less the hour skipped in March, plus the hour repeated in
    // October.
    CHECK(ids.size() == 365 * 1440);
  }
  SECTION("days, weeks, months and years over several years") {
    for (const char* name : {"Europe/Berlin", "America/Santiago", "Asia/Shanghai"}) {
      const Calendar zone(name);
      for (const Period period : {Period::day, Period::week, Period::month, Period::year}) {
        INFO(name << " " << limitcounter::to_string(period));
        walk(zone, period, utc(date::year{2019} / 1 / 1), utc(date::year{2031} / 1 / 1));
      }
    }
  }
}

TEST_CASE("every sampled instant lies inside its window", "[calendar]") {
  const Calendar berlin("Europe/Berlin");
  const Calendar santiago("America/Santiago");
  // A step that is not a divisor of any window length, so the samples fall at varied
  // offsets inside windows.
  const auto step = 7min + 13s + 17ms;
  std::size_t samples = 0;
  for (TimePoint at = utc(date::year{2026} / 3 / 1); at < utc(date::year{2026} / 11 / 30);
       at += step) {
    for (const Calendar* zone : {&berlin, &santiago}) {
      for (const Period period : all_periods) {
        const Window window = zone->window(period, at);
        if (!(window.start <= at && at < window.end)) {
          FAIL(zone->zone_name() << " " << limitcounter::to_string(period) << " " << window.id);
        }
        ++samples;
      }
    }
  }
  CHECK(samples > 100000);
}

TEST_CASE("a window from the per-thread cache is the window computed afresh", "[calendar]") {
  // Around the DST switches of 2026 (Santiago's in April and September, Europe's and Troll's
  // two-hour one in March and October), at varied offsets, at each window's last nanosecond
  // and at its end (the next window's start).
  const std::pair<TimePoint, TimePoint> spans[] = {
      {utc(date::year{2026} / 3 / 27), utc(date::year{2026} / 4 / 7)},
      {utc(date::year{2026} / 9 / 4), utc(date::year{2026} / 10 / 27)}};
  const auto step = 23min + 7s + 17ms;
  for (const char* zone : {"Europe/Berlin", "America/Santiago", "Antarctica/Troll"}) {
    const Calendar cached(zone);
    // Two more calendars of the zone, asked in turn: each finds the other's window in this
    // thread's cache, so each computes its window afresh.
    const Calendar fresh[2] = {Calendar(zone), Calendar(zone)};
    for (const Period period : all_periods) {
      std::vector<TimePoint> instants;
      std::size_t turn = 0;
      for (const auto& [from, to] : spans) {
        for (TimePoint at = from; at < to; at += step) {
          const Window window = fresh[turn++ % 2].window(period, at);
          instants.insert(instants.end(), {at, window.end - 1ns, window.end});
        }
      }
      std::vector<Window> from_cache;
      for (const TimePoint at : instants) { // one after another: most are cache hits
        from_cache.push_back(cached.window(period, at));
      }
      for (std::size_t i = 0; i < instants.size(); ++i) {
        const Window expected = fresh[i % 2].window(period, instants[i]);
        if (from_cache[i].id != expected.id || from_cache[i].start != expected.start ||
            from_cache[i].end != expected.end) {
          FAIL(zone << " " << limitcounter::to_string(period) << " sample " << i << ": "
                    << from_cache[i].id << " from the cache, " << expected.id << " afresh");
        }
      }
    }
  }
  // Nor does it answer for another calendar's zone.
  const TimePoint noon = utc(date::year{2026} / 11 / 11, 12h);
  CHECK(Calendar("Asia/Shanghai").window(Period::hour, noon).id == "2026111120");
  CHECK(Calendar("Europe/Berlin").window(Period::hour, noon).id == "2026111113");
}

TEST_CASE("calendars are copyable and usable from many threads", "[calendar]") {
  const Calendar original("Europe/Berlin");
  const Calendar copy = original; // NOLINT(performance-unnecessary-copy-initialization)
  const TimePoint at = utc(date::year{2026} / 10 / 25, 0h + 30min);
  CHECK(copy.zone_name() == "Europe/Berlin");
  CHECK(copy.window(Period::hour, at).id == original.window(Period::hour, at).id);

  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (std::size_t t = 0; t < mismatches.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        const Window w = copy.window(Period::day, at + std::chrono::hours{i});
        if (!(w.start <= at + std::chrono::hours{i} && at + std::chrono::hours{i} < w.end)) {
          ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  for (const int count : mismatches) {
    CHECK(count == 0);
  }
}

TEST_CASE("unknown zones and periods are errors that name them", "[calendar]") {
  try {
    Calendar("Mars/Olympus_Mons");
    FAIL("no error");
  } catch (const limitcounter::Error& e) {
    CHECK(e.code() == limitcounter::errc::unknown_time_zone);
    CHECK(e.is_input_error());
    CHECK_THAT(e.what(), Catch::Contains("Mars/Olympus_Mons"));
  }
  CHECK_THROWS_AS(Calendar(""), limitcounter::Error);
  for (const Period period : all_periods) {
    CHECK(limitcounter::parse_period(limitcounter::to_string(period)) == period);
  }
  for (const char* bad : {"days", "", "Day", "minute "}) {
    INFO('"' << bad << '"');
    try {
      limitcounter::parse_period(bad);
      FAIL("no error");
    } catch (const limitcounter::Error& e) {
      CHECK(e.code() == limitcounter::errc::invalid_argument);
      CHECK_THAT(e.what(), Catch::Contains(std::string("\"") + bad + "\""));
    }
  }
}

TEST_CASE("DST keeps switching after the last transition a zone file lists (2037)",
          "[calendar][posix_rule]") {
  // Before: every instant after the file's last transition kept its offset (New York stayed
  // on EST, Sydney on AEDT), so ids were an hour off for half of every year from 2038 on.
  using date::year;
  const Calendar new_york("America/New_York");
  // 2038-06-08T04:30Z is 00:30 EDT on June 8 (EST would say 23:30 on June 7)
  const Window june = new_york.window(Period::day, utc(year{2038} / 6 / 8, 4h + 30min));
  CHECK(june.id == "20380608");
  CHECK(june.start == utc(year{2038} / 6 / 8, 4h));
  CHECK(june.end == utc(year{2038} / 6 / 9, 4h));
  CHECK(new_york.window(Period::hour, utc(year{2038} / 6 / 8, 4h + 30min)).id == "2038060800");
  // 2100: summer on EDT, winter on EST
  CHECK(new_york.window(Period::day, utc(year{2100} / 7 / 4, 3h + 30min)).id == "21000703");
  CHECK(new_york.window(Period::day, utc(year{2100} / 7 / 4, 4h + 30min)).id == "21000704");
  CHECK(new_york.window(Period::day, utc(year{2100} / 1 / 15, 4h + 30min)).id == "21000114");
  CHECK(new_york.window(Period::day, utc(year{2100} / 1 / 15, 5h + 30min)).id == "21000115");
  // switch days after 2037 last 23 and 25 hours: 2038-03-14 and 2038-11-07
  const Window spring = new_york.window(Period::day, utc(year{2038} / 3 / 14, 12h));
  CHECK(spring.id == "20380314");
  CHECK(spring.end - spring.start == 23h);
  const Window fall = new_york.window(Period::day, utc(year{2038} / 11 / 7, 12h));
  CHECK(fall.id == "20381107");
  CHECK(fall.end - fall.start == 25h);

  // southern hemisphere: Sydney's file ends on AEDT (2037-10-04); its winter is AEST again
  const Calendar sydney("Australia/Sydney");
  // 2040-07-15T13:30Z is 23:30 AEST on July 15 (AEDT would say 00:30 on July 16)
  CHECK(sydney.window(Period::day, utc(year{2040} / 7 / 15, 13h + 30min)).id == "20400715");
  // 2040-01-15T13:30Z is 00:30 AEDT on January 16
  CHECK(sydney.window(Period::day, utc(year{2040} / 1 / 15, 13h + 30min)).id == "20400116");
  CHECK(sydney.window(Period::day, utc(year{2100} / 7 / 15, 13h + 30min)).id == "21000715");

  // zones without DST keep their one offset
  const Calendar shanghai("Asia/Shanghai");
  CHECK(shanghai.window(Period::day, utc(year{2100} / 6 / 1, 16h + 30min)).id == "21000602");
  CHECK(shanghai.window(Period::day, utc(year{2100} / 6 / 1, 15h + 30min)).id == "21000601");
  const Calendar utc_zone("UTC");
  CHECK(utc_zone.window(Period::day, utc(year{2100} / 6 / 1, 23h + 30min)).id == "21000601");

  // windows stay contiguous across the seam between listed transitions and the rule
  for (const char* name : {"America/New_York", "Australia/Sydney", "Europe/Berlin",
                           "America/Santiago", "Australia/Lord_Howe", "Asia/Shanghai"}) {
    const Calendar zone(name);
    for (const Period period :
         {Period::hour, Period::day, Period::week, Period::month, Period::year}) {
      INFO(name << " " << limitcounter::to_string(period));
      const std::vector<std::string> ids =
          walk(zone, period, utc(year{2036} / 1 / 1), utc(year{2041} / 1 / 1));
      CHECK(std::set<std::string>(ids.begin(), ids.end()).size() == ids.size());
    }
  }
}
