// lua/check/declared_keys_guard.lua, which a test build (LIMITCOUNTER_CHECK_SCRIPT_KEYS=ON, the
// ASan stage of scripts/test.sh) puts before every script so that the whole suite proves its
// scripts touch only declared keys: here, that the guard refuses what it must.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include <limitcounter/redis.hpp>

#include "support/redis_server.hpp"
#include "support/topology.hpp"

using limitcounter::Redis;
using limitcounter::Reply;

namespace {

std::string guard_source() {
  std::ifstream file(LIMITCOUNTER_KEYS_GUARD);
  REQUIRE(file);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// EVAL of `body` behind the guard with KEYS = {`key`}: the reply, or the error's text.
std::string run_guarded(Redis& redis, const std::string& body, const std::string& key) {
  const Reply reply = redis.command(
      {"EVAL", guard_source() + "local redis = guard_keys(redis, KEYS)\n" + body, "1", key});
  if (reply.type() == Reply::Type::integer) {
    return std::to_string(reply.as_integer());
  }
  return reply.is_error() || reply.type() == Reply::Type::string ? reply.as_string()
                                                                 : reply.debug_string();
}

} // namespace

TEST_CASE("the guard of declared keys refuses undeclared keys and unknown commands",
          "[redis][scripts][standalone]") {
  Redis redis{limitcounter::testing::test_options()};
  const std::string key = limitcounter::testing::unique_prefix() + "{g}declared";
  const std::string other = limitcounter::testing::unique_prefix() + "{g}other";
  REQUIRE(redis.command({"SET", key, "v"}).as_string() == "OK");
  CHECK(run_guarded(redis, "return redis.call('GET', KEYS[1])", key) == "v");
  CHECK_THAT(run_guarded(redis, "return redis.call('GET', '" + other + "')", key),
             Catch::Contains("undeclared key " + other + " (GET)"));
  CHECK_THAT(run_guarded(redis, "return redis.pcall('EXISTS', KEYS[1], '" + other + "')", key),
             Catch::Contains("undeclared key " + other + " (EXISTS)"));
  CHECK_THAT(run_guarded(redis,
                         "return redis.call('XREADGROUP', 'GROUP', 'g', 'c', 'STREAMS', '" + other +
                             "', '>')",
                         key),
             Catch::Contains("undeclared key " + other + " (XREADGROUP)"));
  CHECK_THAT(run_guarded(redis, "return redis.call('OBJECT', 'ENCODING', KEYS[1])", key),
             Catch::Contains("command OBJECT is not in its table"));
  // nothing of it reached the server: the refused commands did not run
  CHECK(redis.command({"EXISTS", other}).as_integer() == 0);
}
