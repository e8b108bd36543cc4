#pragma once
// The check every new connection makes before it serves a caller: is this a server the
// library can run on? Pure parsing and decision, so that it is unit-tested with INFO texts.

#include <optional>
#include <string>
#include <string_view>

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
};

/// Reads redis_version, maxmemory and maxmemory_policy from the text of INFO replies
/// ("key:value" lines, CRLF or LF, "# Section" headers; several replies may be concatenated).
/// Never throws: a malformed value is left out, and `server_refusal` then names it.
ServerInfo parse_server_info(std::string_view info);

/// Why the library refuses this server, or nullopt when it accepts it:
/// - a redis_version below 7.0, or none that can be read;
/// - a `maxmemory` above 0 with a `maxmemory_policy` other than `noeviction`, unless
///   `allow_evicting_server`: Redis would evict keys under memory pressure, and an evicted
///   counter resets a limit, an evicted balance or order record loses money. (With noeviction a
///   full server refuses writes with OOM instead: an error the caller sees.)
/// The text names the server's version or policy and what is needed.
std::optional<std::string> server_refusal(const ServerInfo& info, bool allow_evicting_server);

} // namespace limitcounter::detail
