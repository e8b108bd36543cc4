#pragma once
// limitctl's pure parts (no Redis): exit codes, TIME and DIMENSION arguments, and the
// difference between two rule sets. Unit-tested in tests/unit/limitctl_args_test.cpp.

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <limitcounter/calendar.hpp>
#include <limitcounter/dimension.hpp>
#include <limitcounter/error.hpp>
#include <limitcounter/rule.hpp>

namespace limitctl {

/// The exit codes scripts rely on (documented in `limitctl --help` and docs/OPERATIONS.md).
enum ExitCode : int {
  exit_ok = 0,
  exit_not_found = 1, ///< no such transaction, account, packet or dead payout
  exit_usage = 2,     ///< bad usage or bad input (parse errors too)
  exit_redis = 3,     ///< Redis unreachable or a Redis error
  exit_conflict = 4,  ///< a conflict (a stale --expect-version, a reused id, a mismatch)
};

/// Thrown by a command to end limitctl with `code` after printing `what()` to stderr.
class Failure : public std::runtime_error {
public:
  Failure(ExitCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ExitCode code() const noexcept { return code_; }

private:
  ExitCode code_;
};

/// The exit code of a library error: not_found 1, conflict 4, other input errors 2,
/// infrastructure errors 3.
ExitCode exit_code_of(const limitcounter::Error& error) noexcept;

/// An ISO 8601 time: `2026-11-23`, `2026-11-23T15:04`, `2026-11-23T15:04:05[.fff]`, with
/// `Z` or `+08:00` / `-0500` at the end for an absolute time; without an offset it is local
/// time in `zone` (the counters' zone; the earlier instant of a repeated hour, the switch of
/// a skipped one). A space may replace the `T`. Throws Failure(exit_usage) naming the text.
limitcounter::TimePoint parse_time(std::string_view text, const std::string& zone);

/// A dimension as the library spells it, values joined with '+' (`Ali+Deduct+cmb`).
/// Throws Failure(exit_usage) naming the bad part.
limitcounter::Dimension parse_dimension(std::string_view text);

/// The periods `usage` shows: `period` alone, or every period (minute to year) when empty.
/// Throws Failure(exit_usage) for an unknown period.
std::vector<limitcounter::Period> periods_to_show(const std::string& period);

/// Rules added, removed and changed from `before` to `after`, by name (in `after`'s order,
/// removed ones in `before`'s).
struct RuleDiff {
  std::vector<std::string> added;
  std::vector<std::string> removed;
  std::vector<std::string> changed;
  std::size_t unchanged = 0;
  bool attributes_changed = false; ///< the sets know different transaction attributes
  bool empty() const noexcept {
    return added.empty() && removed.empty() && changed.empty() && !attributes_changed;
  }
};
RuleDiff diff_rules(const limitcounter::RuleSet& before, const limitcounter::RuleSet& after);

/// The Redis password held in the file at `path`: its content less one final line break.
/// Throws Failure(exit_usage) naming the path (never the content) when the file cannot be
/// read or holds no password.
std::string read_password_file(const std::string& path);

/// Whether two rules say the same (name, conditions, kind, period, limits, blocking, policy).
bool same_rule(const limitcounter::Rule& a, const limitcounter::Rule& b);

} // namespace limitctl
