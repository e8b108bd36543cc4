#include "args.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include <date/date.h>
#include <date/tz.h>

namespace limitctl {
namespace {

using limitcounter::Period;

Failure bad_time(std::string_view text, const std::string& problem) {
  return Failure(exit_usage, "time \"" + std::string(text) + "\" " + problem +
                                 " (ISO 8601, e.g. 2026-11-23T15:04:05+08:00, 2026-11-23T07:04Z "
                                 "or 2026-11-23 in --tz)");
}

// Reads exactly `digits` digits at `at`, advancing it.
int read_number(std::string_view text, std::size_t& at, std::size_t digits) {
  if (at + digits > text.size()) {
    throw bad_time(text, "is cut short");
  }
  int value = 0;
  for (std::size_t i = 0; i < digits; ++i) {
    const char c = text[at + i];
    if (!std::isdigit(static_cast<unsigned char>(c))) {
      throw bad_time(text, "has '" + std::string(1, c) + "' where a digit belongs");
    }
    value = value * 10 + (c - '0');
  }
  at += digits;
  return value;
}

void expect(std::string_view text, std::size_t& at, char wanted) {
  if (at >= text.size() || text[at] != wanted) {
    throw bad_time(text,
                   "lacks '" + std::string(1, wanted) + "' at position " + std::to_string(at + 1));
  }
  ++at;
}

} // namespace

ExitCode exit_code_of(const limitcounter::Error& error) noexcept {
  if (error.code() == limitcounter::errc::not_found) {
    return exit_not_found;
  }
  if (error.code() == limitcounter::errc::conflict) {
    return exit_conflict;
  }
  return error.is_input_error() ? exit_usage : exit_redis;
}

limitcounter::TimePoint parse_time(std::string_view text, const std::string& zone) {
  using namespace std::chrono;
  std::size_t at = 0;
  const int year = read_number(text, at, 4);
  expect(text, at, '-');
  const int month = read_number(text, at, 2);
  expect(text, at, '-');
  const int day = read_number(text, at, 2);
  const date::year_month_day ymd{date::year{year}, date::month{static_cast<unsigned>(month)},
                                 date::day{static_cast<unsigned>(day)}};
  if (!ymd.ok()) {
    throw bad_time(text, "is not a calendar date");
  }
  milliseconds time_of_day{0};
  if (at < text.size() && (text[at] == 'T' || text[at] == ' ')) {
    ++at;
    const int hour = read_number(text, at, 2);
    expect(text, at, ':');
    const int minute = read_number(text, at, 2);
    int second = 0;
    int millis = 0;
    if (at < text.size() && text[at] == ':') {
      ++at;
      second = read_number(text, at, 2);
      if (at < text.size() && (text[at] == '.' || text[at] == ',')) {
        ++at;
        std::size_t digits = 0;
        for (; at < text.size() && std::isdigit(static_cast<unsigned char>(text[at]));
             ++at, ++digits) {
          if (digits < 3) {
            millis = millis * 10 + (text[at] - '0');
          }
        }
        if (digits == 0) {
          throw bad_time(text, "has no digits after the decimal point");
        }
        for (; digits < 3; ++digits) {
          millis *= 10;
        }
      }
    }
    if (hour > 23 || minute > 59 || second > 59) {
      throw bad_time(text, "is not a time of day");
    }
    time_of_day = hours{hour} + minutes{minute} + seconds{second} + milliseconds{millis};
  }
  const auto local_days = date::local_days{ymd};
  if (at == text.size()) {
    try {
      const date::time_zone* tz = date::locate_zone(zone);
      const auto local =
          date::local_time<milliseconds>{local_days.time_since_epoch() + time_of_day};
      // A local time that never happened (skipped by a spring-forward) or happened twice
      // (a fall-back) is not an error here: choose::earliest picks one instant.
      return time_point_cast<system_clock::duration>(tz->to_sys(local, date::choose::earliest));
    } catch (const std::runtime_error& error) {
      throw Failure(exit_usage, "time zone \"" + zone + "\" is unknown: " + error.what());
    }
  }
  milliseconds offset{0};
  if (text[at] == 'Z' && at + 1 == text.size()) {
    ++at;
  } else if (text[at] == '+' || text[at] == '-') {
    const int sign = text[at] == '-' ? -1 : 1;
    ++at;
    const int hour = read_number(text, at, 2);
    if (at < text.size() && text[at] == ':') {
      ++at;
    }
    const int minute = read_number(text, at, 2);
    if (hour > 23 || minute > 59) {
      throw bad_time(text, "has an offset out of range");
    }
    offset = sign * (hours{hour} + minutes{minute});
  }
  if (at != text.size()) {
    throw bad_time(text, "has \"" + std::string(text.substr(at)) + "\" after the time");
  }
  const auto utc = date::sys_days{ymd}.time_since_epoch() + time_of_day - offset;
  return limitcounter::TimePoint(duration_cast<system_clock::duration>(utc));
}

limitcounter::Dimension parse_dimension(std::string_view text) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (auto cut = text.find(limitcounter::Dimension::separator); cut != std::string_view::npos;
       cut = text.find(limitcounter::Dimension::separator, start)) {
    parts.emplace_back(text.substr(start, cut - start));
    start = cut + 1;
  }
  parts.emplace_back(text.substr(start));
  try {
    return limitcounter::Dimension(parts);
  } catch (const limitcounter::Error& error) {
    throw Failure(exit_usage, "dimension \"" + std::string(text) + "\": " + error.what());
  }
}

std::vector<Period> periods_to_show(const std::string& period) {
  if (period.empty()) {
    return {Period::minute, Period::hour, Period::day, Period::week, Period::month, Period::year};
  }
  try {
    return {limitcounter::parse_period(period)};
  } catch (const limitcounter::Error& error) {
    throw Failure(exit_usage, error.what());
  }
}

bool same_rule(const limitcounter::Rule& a, const limitcounter::Rule& b) {
  const auto same_conditions = [](const auto& x, const auto& y) {
    return std::equal(x.begin(), x.end(), y.begin(), y.end(), [](const auto& c, const auto& d) {
      return c.attribute == d.attribute && c.value == d.value;
    });
  };
  return a.name() == b.name() && same_conditions(a.conditions(), b.conditions()) &&
         a.kind() == b.kind() && a.period() == b.period() && a.max_count() == b.max_count() &&
         a.max_amount() == b.max_amount() && a.is_blocking() == b.is_blocking() &&
         a.failure_policy() == b.failure_policy() && a.local_share() == b.local_share();
}

RuleDiff diff_rules(const limitcounter::RuleSet& before, const limitcounter::RuleSet& after) {
  const auto find = [](const limitcounter::RuleSet& set, const std::string& name) {
    const auto& rules = set.rules();
    const auto it = std::find_if(rules.begin(), rules.end(), [&](const limitcounter::Rule& rule) {
      return rule.name() == name;
    });
    return it == rules.end() ? nullptr : &*it;
  };
  RuleDiff diff;
  diff.attributes_changed = before.attributes() != after.attributes();
  for (const auto& rule : after.rules()) {
    const limitcounter::Rule* old = find(before, rule.name());
    if (old == nullptr) {
      diff.added.push_back(rule.name());
    } else if (!same_rule(*old, rule)) {
      diff.changed.push_back(rule.name());
    } else {
      ++diff.unchanged;
    }
  }
  for (const auto& rule : before.rules()) {
    if (find(after, rule.name()) == nullptr) {
      diff.removed.push_back(rule.name());
    }
  }
  return diff;
}

std::string read_password_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::string password((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (!file.is_open() || file.bad()) {
    throw Failure(exit_usage,
                  "--password-file \"" + path + "\" cannot be read: " + std::strerror(errno));
  }
  // `echo secret > file` ends it with a line break that is not part of the password.
  if (!password.empty() && password.back() == '\n') {
    password.pop_back();
    if (!password.empty() && password.back() == '\r') {
      password.pop_back();
    }
  }
  if (password.empty()) {
    throw Failure(exit_usage, "--password-file \"" + path + "\" holds no password");
  }
  return password;
}

} // namespace limitctl
