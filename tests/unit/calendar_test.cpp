#include <catch2/catch.hpp>

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

TimePoint local(const char* zone, date::year_month_day day, std::chrono::milliseconds time = 0ms) {
  return date::make_zoned(zone, date::local_days{day} + time).get_sys_time();
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
}

TEST_CASE("16:30 UTC on 2021-11-11 is Shanghai's 2021-11-12", "[calendar]") {
  const Calendar shanghai("Asia/Shanghai");
  const TimePoint at = utc(date::year{2021} / 11 / 11, 16h + 30min);
  CHECK(shanghai.window(Period::day, at).id == "20211112");
  CHECK(Calendar("UTC").window(Period::day, at).id == "20211111");
  // local midnight is 16:00 UTC the day before
  CHECK(shanghai.window(Period::day, at).start == utc(date::year{2021} / 11 / 11, 16h));
}

TEST_CASE("ISO week-years at their edges", "[calendar]") {
  const Calendar zone("UTC");
  CHECK(zone.window(Period::week, utc(date::year{2021} / 1 / 3)).id == "2020-W53");
  CHECK(zone.window(Period::week, utc(date::year{2021} / 1 / 4)).id == "2021-W01");
  CHECK(zone.window(Period::week, utc(date::year{2024} / 12 / 30)).id == "2025-W01");
  CHECK(zone.window(Period::week, utc(date::year{2024} / 12 / 29)).id == "2024-W52");
  const Window w = zone.window(Period::week, utc(date::year{2021} / 1 / 3, 23h));
  CHECK(w.start == utc(date::year{2020} / 12 / 28)); // a Monday
  CHECK(w.end - w.start == days{7});
}

TEST_CASE("month ends, leap days and year ends", "[calendar]") {
  const Calendar zone("Asia/Shanghai");
  const auto jan31 = local("Asia/Shanghai", date::year{2027} / 1 / 31, 23h + 59min);
  CHECK(zone.window(Period::month, jan31).id == "202701");
  CHECK(zone.window(Period::month, jan31).end == local("Asia/Shanghai", date::year{2027} / 2 / 1));
  for (const int year : {2024, 2028}) {
    const auto leap = local("Asia/Shanghai", date::year{year} / 2 / 29, 12h);
    CHECK(zone.window(Period::day, leap).id == std::to_string(year) + "0229");
    CHECK(zone.window(Period::month, leap).end - zone.window(Period::month, leap).start ==
          days{29});
  }
  const auto feb2027 = local("Asia/Shanghai", date::year{2027} / 2 / 10);
  CHECK(zone.window(Period::month, feb2027).end - zone.window(Period::month, feb2027).start ==
        days{28});
  const auto new_year_eve =
      local("Asia/Shanghai", date::year{2026} / 12 / 31, 23h + 59min + 59s + 999ms);
  CHECK(zone.window(Period::year, new_year_eve).id == "2026");
  CHECK(zone.window(Period::year, new_year_eve + 1ms).id == "2027");
  CHECK(zone.window(Period::day, new_year_eve).id !=
        zone.window(Period::day, new_year_eve + 1ms).id);
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
  }
}

TEST_CASE("hours across the spring-forward gap and the fall-back overlap", "[calendar]") {
  const Calendar berlin("Europe/Berlin");
  // 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00 UTC). Local 02:xx never happens.
  const Window before_gap = berlin.window(Period::hour, utc(date::year{2026} / 3 / 29, 0h + 30min));
  CHECK(before_gap.id == "2026032901");
  CHECK(before_gap.end == utc(date::year{2026} / 3 / 29, 1h));
  const Window after_gap = berlin.window(Period::hour, utc(date::year{2026} / 3 / 29, 1h));
  CHECK(after_gap.id == "2026032903");
  CHECK(after_gap.start == before_gap.end);

  // 2026-10-25: 03:00 CEST falls back to 02:00 CET; local 02:xx happens twice: two
  // one-hour windows that share the id "2026102502" (so one counter covers both passes).
  const Window first_pass =
      berlin.window(Period::hour, utc(date::year{2026} / 10 / 25, 0h + 30min));
  const Window second_pass =
      berlin.window(Period::hour, utc(date::year{2026} / 10 / 25, 1h + 30min));
  CHECK(first_pass.id == "2026102502");
  CHECK(second_pass.id == "2026102502");
  CHECK(first_pass.start == utc(date::year{2026} / 10 / 25, 0h));
  CHECK(first_pass.end == second_pass.start);
  CHECK(second_pass.end == utc(date::year{2026} / 10 / 25, 2h));
  const Window minute =
      berlin.window(Period::minute, utc(date::year{2026} / 10 / 25, 1h + 30min + 5s));
  CHECK(minute.id == "202610250230");
  CHECK(minute.end - minute.start == 1min);
}

TEST_CASE("consecutive windows are contiguous and contain their instants", "[calendar]") {
  const auto walk = [](const Calendar& zone, Period period, TimePoint from, TimePoint to) {
    Window previous = zone.window(period, from);
    while (previous.end < to) {
      const Window next = zone.window(period, previous.end);
      REQUIRE(next.start == previous.end);
      REQUIRE(next.start < next.end);
      REQUIRE((next.id != previous.id || period == Period::hour || period == Period::minute));
      REQUIRE(zone.window(period, next.start + (next.end - next.start) / 2).id == next.id);
      REQUIRE(zone.window(period, next.end - 1ms).id == next.id);
      previous = next;
    }
  };
  for (const char* name :
       {"Europe/Berlin", "America/New_York", "Asia/Shanghai", "America/Santiago"}) {
    const Calendar zone(name);
    for (const Period period : all_periods) {
      INFO(name << " " << limitcounter::to_string(period));
      if (period == Period::minute || period == Period::hour) {
        // the days around the DST switches of the year, both hemispheres
        for (const auto month : {3U, 4U, 9U, 10U, 11U}) {
          for (const auto day : {1U, 6U, 24U}) {
            const TimePoint from = utc(date::year{2026} / date::month{month} / date::day{day});
            walk(zone, period, from, from + days{period == Period::minute ? 2 : 9});
          }
        }
      } else {
        walk(zone, period, utc(date::year{2024} / 1 / 1), utc(date::year{2028} / 1 / 1));
      }
    }
  }
}

TEST_CASE("unknown zones and periods are errors that name them", "[calendar]") {
  try {
    Calendar("Mars/Olympus_Mons");
    FAIL("no error");
  } catch (const limitcounter::Error& e) {
    CHECK(e.code() == limitcounter::errc::unknown_time_zone);
    CHECK_THAT(e.what(), Catch::Contains("Mars/Olympus_Mons"));
  }
  for (const Period period : all_periods) {
    CHECK(limitcounter::parse_period(limitcounter::to_string(period)) == period);
  }
  for (const char* bad : {"days", "", "Day"}) {
    CHECK_THROWS_WITH(limitcounter::parse_period(bad),
                      Catch::Contains(std::string("\"") + bad + "\""));
  }
}
