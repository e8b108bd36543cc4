#pragma once
// The check every new connection makes before it serves a caller: is this a server the
// library can run on? Pure parsing and decision, so that it is unit-tested with INFO texts.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <limitcounter/reply.hpp>

namespace limitcounter::detail {

/// The lowest Redis the scripts run on: they set expiries with PEXPIREAT/PEXPIRE ... NX and
/// GT, which Redis 7.0 added (an older server fails each script with a syntax error).
inline constexpr int minimum_redis_major = 7;
inline constexpr int minimum_redis_minor = 0;

/// What the check reads from INFO (fields that are absent stay empty / nullopt).
struct ServerInfo {
  std::string version;                ///< redis_version, e.g. "7.0.15"
  std::optional<long long> maxmemory; ///< bytes; 0 means no limit (nothing is evicted)
  std::string maxmemory_policy;       ///< e.g. "noeviction", "allkeys-lru"
  /// Of `checked_commands()`, those the server does not know (see parse_command_info).
  std::vector<std::string> missing_commands;
};

/// The commands the check asks COMMAND INFO about: those every job needs (scripts are run with
/// EVALSHA after SCRIPT LOAD, and every job's scripts call HGET, HMGET and HSET). A server
/// started with `rename-command EVALSHA ""` would otherwise fail every call with "unknown
/// command". (The full list is acl.hpp's required_commands; its COMMAND INFO reply is 13 KB,
/// too much for every new connection.)
const std::vector<std::string>& checked_commands();

/// Puts into `info.missing_commands` the commands of `checked_commands()` whose element of
/// `command_info` (the reply of COMMAND INFO with them, in that order) is nil: unknown to the
/// server, e.g. renamed or disabled with rename-command. A reply that is not an array of one
/// element per command counts them all missing. Never throws.
void parse_command_info(const Reply& command_info, ServerInfo& info);

/// Reads redis_version, maxmemory and maxmemory_policy from the text of INFO replies
/// ("key:value" lines, CRLF or LF, "# Section" headers; several replies may be concatenated).
/// Never throws: a malformed value is left out, and `server_refusal` then names it.
ServerInfo parse_server_info(std::string_view info);

/// Why the library refuses this server, or nullopt when it accepts it:
/// - a redis_version below 7.0, or none that can be read;
/// - a command of `checked_commands()` missing;
/// - a `maxmemory` above 0 with a `maxmemory_policy` other than `noeviction`, unless
///   `allow_evicting_server`: Redis would evict keys under memory pressure, and an evicted
///   counter resets a limit, an evicted balance or order record loses money. (With noeviction a
///   full server refuses writes with OOM instead: an error the caller sees.)
/// The text names the server's version, the missing commands or the policy, and what is
/// needed.
std::optional<std::string> server_refusal(const ServerInfo& info, bool allow_evicting_server);

} // namespace limitcounter::detail
