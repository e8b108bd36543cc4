#pragma once
// What every limitctl command shares: the common flags and the objects built from them.

#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include <limitcounter/calendar.hpp>
#include <limitcounter/redis.hpp>

#include "args.hpp"
#include "output.hpp"

namespace limitctl {

/// The common flags (--uri, --prefix, --buckets, --tz, --json, --timeout), filled in by CLI11.
struct Context {
  std::string uri; ///< --uri, else LIMITCOUNTER_REDIS_URI
  /// --password-file: the password, read from a file (ps shows a command line, not a file)
  std::string password_file;
  std::string prefix; ///< --prefix; empty: the library's default for each job
  /// --buckets, else LIMITCOUNTER_COUNTER_BUCKETS: the writers' `counter_buckets`
  std::uint32_t buckets = 1;
  std::string tz = "UTC"; ///< --tz, else LIMITCOUNTER_TZ: the zone the counters were cut in
  bool json = false;      ///< --json
  int timeout_ms = 2000;  ///< --timeout: connect and command timeout (an operator can wait)
  /// Set by the commands that change data: only their lost reply (Outcome::unknown) "may
  /// have run"; a read's changed nothing.
  bool writes = false;

  /// The connection from the URI, with the password of --password-file, else of
  /// LIMITCOUNTER_REDIS_PASSWORD, else the URI's; Failure(exit_usage) when no URI is given.
  limitcounter::Redis redis() const;
  /// The calendar of --tz.
  limitcounter::Calendar calendar() const;
  /// --prefix, or `library_default` when it was not given.
  std::string prefix_or(std::string_view library_default) const;
  /// `parse_time(text, tz)`, or now when `text` is empty.
  limitcounter::TimePoint time(const std::string& text) const;
  /// Prints a command's result (see output.hpp).
  void show(const Json& value) const { print(value, json); }
};

/// ISO 8601 UTC with milliseconds, e.g. 2026-11-23T07:04:05.123Z.
std::string format_time(limitcounter::TimePoint at);

// One function per command group; each adds its subcommands to `app`.
void add_rules_commands(CLI::App& app, Context& context);
void add_counter_commands(CLI::App& app, Context& context);
void add_wallet_commands(CLI::App& app, Context& context);
void add_packet_commands(CLI::App& app, Context& context);
void add_functions_commands(CLI::App& app, Context& context);

} // namespace limitctl
