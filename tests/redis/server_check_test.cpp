// The server check of every new connection against real redis-servers: a server that may
// evict keys is refused (unless allowed), one with noeviction or no memory limit is used.
// (Older versions are covered by the unit tests with their INFO texts: only Redis 7 is here.)
#include <catch2/catch.hpp>

#include <string>

#include <limitcounter/error.hpp>
#include <limitcounter/redis.hpp>

#include "support/probe.hpp"
#include "support/redis_server.hpp"

using limitcounter::errc;
using limitcounter::Error;
using limitcounter::Outcome;
using limitcounter::Redis;
using limitcounter::RedisOptions;
using limitcounter::testing::command_calls;
using limitcounter::testing::error_of;
using limitcounter::testing::RedisServer;

TEST_CASE("a server with maxmemory and an evicting policy is refused unless allowed",
          "[redis][server_check][standalone]") {
  RedisServer server({"--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"});
  const Error e = error_of([&] { Redis(server.options()).command({"SET", "evictable", "1"}); });
  CHECK(e.code() == errc::connect_failed);
  CHECK(e.outcome() == Outcome::not_sent);
  CHECK_THAT(e.what(), Catch::Contains("127.0.0.1:" + std::to_string(server.port())) &&
                           Catch::Contains("maxmemory-policy allkeys-lru") &&
                           Catch::Contains("maxmemory 104857600") &&
                           Catch::Contains("allow_evicting_server"));

  RedisOptions allowed = server.options();
  allowed.allow_evicting_server = true;
  Redis redis(allowed);
  // the refused call never reached the server
  CHECK(redis.command({"EXISTS", "evictable"}).as_integer() == 0);
  CHECK(redis.command({"SET", "evictable", "1"}).as_string() == "OK");
}

TEST_CASE("a server with maxmemory and noeviction is used; the check is once per connection",
          "[redis][server_check][standalone]") {
  RedisServer server({"--maxmemory", "100mb", "--maxmemory-policy", "noeviction"});
  RedisOptions options = server.options();
  options.pool_size = 1;
  Redis redis(options);
  CHECK(redis.command({"SET", "k", "v"}).as_string() == "OK");
  // INFO server and INFO memory when the one connection was made (INFO commandstats counts
  // the calls before itself)
  const long long at_connect = command_calls(redis, "info");
  CHECK(at_connect == 2);
  for (int i = 0; i < 10; ++i) {
    CHECK(redis.command({"GET", "k"}).as_string() == "v");
  }
  CHECK(command_calls(redis, "info") == at_connect + 1); // just the first commandstats
}

TEST_CASE("a server without EVALSHA (rename-command) is refused at connect, naming it",
          "[redis][server_check][standalone]") {
  RedisServer server({"--rename-command", "evalsha", ""});
  const Error e = error_of([&] { Redis(server.options()).command({"SET", "k", "1"}); });
  CHECK(e.code() == errc::connect_failed);
  CHECK(e.outcome() == Outcome::not_sent);
  CHECK_THAT(e.what(), Catch::Contains("127.0.0.1:" + std::to_string(server.port())) &&
                           Catch::Contains("Redis 7.") &&
                           Catch::Contains("does not know the command evalsha (") &&
                           Catch::Contains("rename-command"));
}
