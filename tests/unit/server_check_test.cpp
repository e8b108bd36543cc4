// The server check made on every new connection: INFO texts as Redis sends them.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "redis/server_check.hpp"

using limitcounter::Reply;
using limitcounter::detail::checked_commands;
using limitcounter::detail::parse_command_info;
using limitcounter::detail::parse_server_info;
using limitcounter::detail::server_refusal;

namespace {

// The replies of INFO server and INFO memory, shortened, as one text (CRLF lines).
std::string info_text(const std::string& version, const std::string& maxmemory,
                      const std::string& policy) {
  return "# Server\r\nredis_version:" + version +
         "\r\nredis_git_sha1:00000000\r\nredis_mode:standalone\r\nos:Linux 6.1.0 x86_64\r\n"
         "tcp_port:6379\r\n\r\n"
         "# Memory\r\nused_memory:1012344\r\nused_memory_human:988.62K\r\nmaxmemory:" +
         maxmemory + "\r\nmaxmemory_human:0B\r\nmaxmemory_policy:" + policy +
         "\r\nallocator_frag_ratio:1.00\r\n";
}

std::string refusal(const std::string& text, bool allow_evicting = false) {
  return server_refusal(parse_server_info(text), allow_evicting).value_or("");
}

} // namespace

TEST_CASE("INFO server and memory are parsed", "[server_check]") {
  const auto info = parse_server_info(info_text("7.0.15", "104857600", "allkeys-lru"));
  CHECK(info.version == "7.0.15");
  REQUIRE(info.maxmemory.has_value());
  CHECK(*info.maxmemory == 104857600);
  CHECK(info.maxmemory_policy == "allkeys-lru");
  // LF-only lines and a last line without a newline
  const auto bare =
      parse_server_info("redis_version:7.2.4\nmaxmemory:0\nmaxmemory_policy:noeviction");
  CHECK(bare.version == "7.2.4");
  CHECK(bare.maxmemory == 0);
  CHECK(bare.maxmemory_policy == "noeviction");
  // a malformed maxmemory is left out (and then refused below)
  CHECK_FALSE(parse_server_info("maxmemory:12abc\r\n").maxmemory.has_value());
  CHECK_FALSE(parse_server_info("maxmemory:-1\r\n").maxmemory.has_value());
}

TEST_CASE("a Redis older than 7.0 is refused, naming its version and what is needed",
          "[server_check]") {
  for (const char* old_version : {"6.2.6", "6.0.16", "5.0.14", "2.8.24"}) {
    const std::string reason = refusal(info_text(old_version, "0", "noeviction"));
    CAPTURE(old_version, reason);
    CHECK(reason.find(std::string("Redis ") + old_version) != std::string::npos);
    CHECK(reason.find("needs Redis 7.0 or newer") != std::string::npos);
    CHECK(reason.find("PEXPIREAT") != std::string::npos);
    // the version is never waived
    CHECK_FALSE(refusal(info_text(old_version, "0", "noeviction"), true).empty());
  }
  CHECK(refusal("# Server\r\nredis_mode:standalone\r\n").find("no redis_version") !=
        std::string::npos);
  CHECK_FALSE(refusal(info_text("garbage", "0", "noeviction")).empty());
}

TEST_CASE("Redis 7.0 and newer without a memory limit are accepted", "[server_check]") {
  for (const char* version : {"7.0.0", "7.0.15", "7.2", "7.2.4", "7.4.1", "8.0.0", "10.0.0"}) {
    CAPTURE(version);
    CHECK(refusal(info_text(version, "0", "noeviction")).empty());
    // no maxmemory: nothing is evicted whatever the policy says
    CHECK(refusal(info_text(version, "0", "allkeys-lru")).empty());
  }
}

TEST_CASE("a server that may evict keys is refused unless allowed", "[server_check]") {
  CHECK(refusal(info_text("7.0.15", "104857600", "noeviction")).empty());
  for (const char* policy : {"allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru",
                             "volatile-lfu", "volatile-random", "volatile-ttl"}) {
    const std::string text = info_text("7.0.15", "104857600", policy);
    const std::string reason = refusal(text);
    CAPTURE(policy, reason);
    CHECK(reason.find(std::string("maxmemory-policy ") + policy) != std::string::npos);
    CHECK(reason.find("maxmemory 104857600") != std::string::npos);
    CHECK(reason.find("Redis 7.0.15") != std::string::npos);
    CHECK(reason.find("allow_evicting_server") != std::string::npos);
    CHECK(refusal(text, true).empty());
  }
  // a policy or limit that cannot be read cannot rule eviction out
  CHECK(refusal("redis_version:7.0.15\r\nmaxmemory:0\r\n").find("no readable maxmemory") !=
        std::string::npos);
  CHECK_FALSE(refusal("redis_version:7.0.15\r\nmaxmemory_policy:noeviction\r\n").empty());
  CHECK(refusal("redis_version:7.0.15\r\nmaxmemory_policy:noeviction\r\n", true).empty());
}

namespace {

// A COMMAND INFO reply for checked_commands(): an entry (its name first, as Redis sends it)
// for each command, nil for the one named `missing`.
Reply command_info_reply(const std::string& missing) {
  std::vector<Reply> entries;
  for (const std::string& name : checked_commands()) {
    entries.push_back(name == missing ? Reply()
                                      : Reply::array({Reply::string(name), Reply::integer(-3)}));
  }
  return Reply::array(std::move(entries));
}

std::string command_refusal(const Reply& command_info) {
  auto info = parse_server_info(info_text("7.0.15", "0", "noeviction"));
  parse_command_info(command_info, info);
  return server_refusal(info, false).value_or("");
}

} // namespace

TEST_CASE("COMMAND INFO: a command the server does not know is refused, naming it",
          "[server_check]") {
  CHECK(command_refusal(command_info_reply("")).empty());
  for (const std::string& missing : checked_commands()) {
    const std::string reason = command_refusal(command_info_reply(missing));
    CAPTURE(missing, reason);
    CHECK(reason.find("Redis 7.0.15") != std::string::npos);
    CHECK(reason.find("does not know the command " + missing + " (") != std::string::npos);
    CHECK(reason.find("rename-command") != std::string::npos);
  }
  // a reply that is not one entry per command cannot show them known: all are named
  for (const Reply& odd : {Reply(), Reply::array({}), Reply::string("evalsha")}) {
    const std::string reason = command_refusal(odd);
    CAPTURE(reason);
    CHECK(reason.find("commands evalsha, script|load, hget, hmget, hset (") != std::string::npos);
  }
  // the version is checked first: an old server is refused for its version
  auto old = parse_server_info(info_text("6.2.6", "0", "noeviction"));
  parse_command_info(command_info_reply("script|load"), old);
  CHECK(server_refusal(old, false).value_or("").find("needs Redis 7.0") != std::string::npos);
}
