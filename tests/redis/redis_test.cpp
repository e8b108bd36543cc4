#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/error.hpp>
#include <limitcounter/redis.hpp>

#include "support/probe.hpp"
#include "support/redis_server.hpp"
#include "support/topology.hpp"

using namespace std::chrono_literals;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::Outcome;
using limitcounter::Redis;
using limitcounter::RedisOptions;
using limitcounter::Reply;
using limitcounter::Script;
using limitcounter::ScriptCall;
using limitcounter::testing::RedisServer;
using limitcounter::testing::test_options;
using limitcounter::testing::unique_prefix;

using limitcounter::testing::error_of;
using limitcounter::testing::probe;
using limitcounter::testing::probe_args;

TEST_CASE("every embedded script's SHA1 is what SCRIPT LOAD returns", "[redis][scripts]") {
  Redis redis(test_options());
  REQUIRE(limitcounter::scripts::all.size() >= 4);
  for (const Script* script : limitcounter::scripts::all) {
    INFO(script->name);
    const Reply loaded = redis.command({"SCRIPT", "LOAD", std::string(script->source)});
    CHECK(loaded.as_string() == script->sha1);
    CHECK(script->source.substr(0, 3) == "-- "); // every script opens with its contract
  }
}

TEST_CASE("a script error is Outcome::failed and names the script", "[redis][scripts]") {
  Redis redis(test_options());
  auto args = probe_args();
  args[1] = "not-a-number";
  const Error e = error_of([&] { redis.eval(probe, {unique_prefix() + "k"}, args); });
  CHECK(e.code() == errc::server_error);
  CHECK(e.outcome() == Outcome::failed);
  CHECK_THAT(e.what(), Catch::Contains("counter_add"));
}

TEST_CASE("AUTH with a password, an ACL user, and SELECT", "[redis][auth][standalone]") {
  RedisServer server({"--requirepass", "s3cret-pw"});
  RedisOptions options = server.options();
  options.password = "s3cret-pw";
  options.db = 5;
  Redis redis(options);
  redis.command({"SET", "where", "db5"});
  CHECK(redis.command({"CLIENT", "INFO"}).as_string().find("db=5") != std::string::npos);

  redis.command({"ACL", "SETUSER", "limits", "on", ">limits-pw", "~*", "+@all"});
  Redis as_user(Redis(RedisOptions::from_uri("redis://limits:limits-pw@127.0.0.1:" +
                                             std::to_string(server.port()))));
  CHECK(as_user.command({"ACL", "WHOAMI"}).as_string() == "limits");

  RedisOptions wrong = server.options();
  wrong.password = "wrong-pw-value";
  const Error e = error_of([&] { Redis(wrong).command({"PING"}); });
  CHECK(e.code() == errc::connect_failed);
  CHECK(e.outcome() == Outcome::not_sent);
  CHECK_THAT(e.what(), !Catch::Contains("wrong-pw-value"));
}

TEST_CASE("many threads share one Redis", "[redis][concurrency]") {
  Redis redis(test_options());
  const std::string key = unique_prefix() + "shared";
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        try {
          redis.command({"INCR", key});
        } catch (const Error&) {
          ++failures;
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  CHECK(failures == 0);
  CHECK(redis.command({"GET", key}).as_string() == "3200");
}
