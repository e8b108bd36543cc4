#include "redis/server_check.hpp"

#include <charconv>

namespace limitcounter::detail {
namespace {

// The decimal number at the start of `text`, moving `text` past it; nullopt if none.
std::optional<long long> take_number(std::string_view& text) {
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data()) {
    return std::nullopt;
  }
  text.remove_prefix(static_cast<std::size_t>(end - text.data()));
  return value;
}

// True when `version` ("major.minor[.patch...]") is at least 7.0; false when it is lower or
// cannot be read.
bool recent_enough(std::string_view version) {
  const auto major = take_number(version);
  if (!major || version.empty() || version.front() != '.') {
    return false;
  }
  version.remove_prefix(1);
  const auto minor = take_number(version);
  if (!minor) {
    return false;
  }
  return *major > minimum_redis_major ||
         (*major == minimum_redis_major && *minor >= minimum_redis_minor);
}

} // namespace

const std::vector<std::string>& checked_commands() {
  static const std::vector<std::string> commands{"evalsha", "script|load", "hget", "hmget", "hset"};
  return commands;
}

void parse_command_info(const Reply& command_info, ServerInfo& info) {
  const std::vector<std::string>& commands = checked_commands();
  const bool readable = command_info.type() == Reply::Type::array &&
                        command_info.as_array().size() == commands.size();
  info.missing_commands.clear();
  for (std::size_t i = 0; i < commands.size(); ++i) {
    if (!readable || command_info.as_array()[i].is_nil()) {
      info.missing_commands.push_back(commands[i]);
    }
  }
}

ServerInfo parse_server_info(std::string_view info) {
  ServerInfo result;
  while (!info.empty()) {
    const std::size_t end = info.find('\n');
    std::string_view line = info.substr(0, end);
    info.remove_prefix(end == std::string_view::npos ? info.size() : end + 1);
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos || line.front() == '#') {
      continue;
    }
    const std::string_view key = line.substr(0, colon);
    std::string_view value = line.substr(colon + 1);
    if (key == "redis_version") {
      result.version = std::string(value);
    } else if (key == "maxmemory_policy") {
      result.maxmemory_policy = std::string(value);
    } else if (key == "maxmemory") {
      const auto bytes = take_number(value);
      if (bytes && value.empty() && *bytes >= 0) {
        result.maxmemory = bytes;
      }
    }
  }
  return result;
}

std::optional<std::string> server_refusal(const ServerInfo& info, bool allow_evicting_server) {
  const std::string needed = "limitcounter needs Redis " + std::to_string(minimum_redis_major) +
                             "." + std::to_string(minimum_redis_minor) +
                             " or newer: its scripts set expiries with PEXPIREAT and PEXPIRE "
                             "... NX / GT, which older servers refuse";
  if (info.version.empty()) {
    return "the server reports no redis_version in INFO server; " + needed;
  }
  if (!recent_enough(info.version)) {
    return "the server is Redis " + info.version + "; " + needed;
  }
  if (!info.missing_commands.empty()) {
    std::string names;
    for (const std::string& name : info.missing_commands) {
      names += (names.empty() ? "" : ", ") + name;
    }
    return "the server (Redis " + info.version + ") does not know the command" +
           (info.missing_commands.size() > 1 ? "s " : " ") + names +
           " (COMMAND INFO answers nil: renamed or disabled with rename-command?); limitcounter "
           "needs " +
           (info.missing_commands.size() > 1 ? "them" : "it") + " to run its scripts";
  }
  if (allow_evicting_server) {
    return std::nullopt;
  }
  const std::string why = "Redis may evict keys under memory pressure, and an evicted counter "
                          "resets a limit, an evicted balance or order record loses money. Set "
                          "maxmemory-policy noeviction (or maxmemory 0), or accept the risk with "
                          "RedisOptions::allow_evicting_server";
  if (!info.maxmemory || info.maxmemory_policy.empty()) {
    return "the server (Redis " + info.version +
           ") reports no readable maxmemory or maxmemory_policy in INFO memory, so eviction "
           "cannot be ruled out: " +
           why;
  }
  if (*info.maxmemory > 0 && info.maxmemory_policy != "noeviction") {
    return "the server (Redis " + info.version + ") has maxmemory " +
           std::to_string(*info.maxmemory) + " with maxmemory-policy " + info.maxmemory_policy +
           ": " + why;
  }
  return std::nullopt;
}

} // namespace limitcounter::detail
