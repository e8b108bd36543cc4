// limitctl: the operator CLI of limitcounter (docs/OPERATIONS.md, "limitctl").
#include <cstdlib>
#include <iostream>

#include <date/date.h>

#include <limitcounter/error.hpp>

#include "limitctl.hpp"

namespace limitctl {

limitcounter::Redis Context::redis() const {
  if (uri.empty()) {
    throw Failure(exit_usage, "no Redis: pass --uri or set LIMITCOUNTER_REDIS_URI "
                              "(redis://host:port, redis-cluster://host:port,host:port, ...)");
  }
  limitcounter::RedisOptions options = limitcounter::RedisOptions::from_uri(uri);
  if (!password_file.empty()) {
    options.password = read_password_file(password_file);
  } else if (const char* password = std::getenv("LIMITCOUNTER_REDIS_PASSWORD");
             password != nullptr && *password != '\0') {
    options.password = password;
  }
  options.connect_timeout = std::chrono::milliseconds(timeout_ms);
  options.command_timeout = std::chrono::milliseconds(timeout_ms);
  return limitcounter::Redis(options);
}

limitcounter::Calendar Context::calendar() const { return limitcounter::Calendar(tz); }

std::string Context::prefix_or(std::string_view library_default) const {
  return prefix.empty() ? std::string(library_default) : prefix;
}

limitcounter::TimePoint Context::time(const std::string& text) const {
  return text.empty() ? limitcounter::Clock::now() : parse_time(text, tz);
}

std::string format_time(limitcounter::TimePoint at) {
  return date::format("%FT%TZ", std::chrono::time_point_cast<std::chrono::milliseconds>(at));
}

} // namespace limitctl

int main(int argc, char** argv) {
  using namespace limitctl;
  CLI::App app{"limitctl: read and correct limitcounter's data in Redis (counters, rules, "
               "transactions, wallets, red packets)"};
  app.require_subcommand(1);
  // The common flags may also follow the subcommand (`limitctl usage ... --json`).
  app.fallthrough();
  app.footer(
      "Exit codes: 0 ok; 1 not found (no such transaction, account, packet or dead "
      "payout); 2 bad usage or bad input; 3 Redis unreachable or a Redis error (a "
      "write's message saying \"may have run\": retry with the same id); 4 conflict (a stale "
      "--expect-version, an id reused for other content, wallet compare mismatch).");
  Context context;
  app.add_option("--uri", context.uri,
                 "Redis URI (redis://, rediss://, unix://, redis-cluster://, redis-sentinel://); "
                 "no password in it: ps shows the command line")
      ->envname("LIMITCOUNTER_REDIS_URI");
  app.add_option("--password-file", context.password_file,
                 "file holding the Redis password (one line; it replaces the URI's). Or set "
                 "LIMITCOUNTER_REDIS_PASSWORD. Never give the password on the command line")
      ->envname("LIMITCOUNTER_REDIS_PASSWORD_FILE");
  app.add_option("--prefix", context.prefix,
                 "key prefix (default: the library's default of each job: trans:limit:, "
                 "wallet:, rp:, lc:)");
  app.add_option("--buckets", context.buckets,
                 "counter_buckets of the writers of this prefix (default 1; the counters are "
                 "read in the wrong hashes with another value)")
      ->envname("LIMITCOUNTER_COUNTER_BUCKETS")
      ->check(CLI::Range(1, 16384));
  app.add_option("--tz", context.tz, "IANA zone the counters' windows were cut in (default UTC)")
      ->envname("LIMITCOUNTER_TZ");
  app.add_flag("--json", context.json, "print JSON (one document) instead of text");
  app.add_option("--timeout", context.timeout_ms, "connect and command timeout, ms (default 2000)")
      ->check(CLI::Range(1, 600000));
  add_rules_commands(app, context);
  add_counter_commands(app, context);
  add_wallet_commands(app, context);
  add_packet_commands(app, context);
  add_functions_commands(app, context);
  // An error's message may carry text from Redis (a server's error reply): shown escaped.
  try {
    app.parse(argc, argv);
    return exit_ok;
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);
    return code == 0 ? exit_ok : exit_usage;
  } catch (const Failure& failure) {
    std::cerr << "limitctl: " << shown(failure.what()) << '\n';
    return failure.code();
  } catch (const limitcounter::Error& error) {
    std::cerr << "limitctl: " << shown(error.what());
    if (error.outcome() == limitcounter::Outcome::unknown) {
      std::cerr << (context.writes ? " (may have run: retry with the same id)"
                                   : " (a read: nothing changed, retry)");
    }
    std::cerr << '\n';
    return exit_code_of(error);
  } catch (const std::exception& error) {
    std::cerr << "limitctl: " << shown(error.what()) << '\n';
    return exit_redis;
  }
}
