#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/error.hpp>
#include <limitcounter/redis.hpp>

#include "support/redis_server.hpp"

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
using limitcounter::testing::shared_server;
using limitcounter::testing::unique_prefix;

namespace {

// counter_add is a real embedded script with a simple contract: a good probe.
const Script& probe = limitcounter::scripts::counter_add;

std::vector<std::string> probe_args() { return {"f", "1", "10", "4102444800000"}; }

template <typename Action> Error error_of(Action&& action) {
  try {
    action();
  } catch (const Error& e) {
    return e;
  }
  FAIL("no error");
  throw std::logic_error("unreachable");
}

} // namespace

TEST_CASE("every embedded script's SHA1 is what SCRIPT LOAD returns", "[redis][scripts]") {
  Redis redis(shared_server().options());
  REQUIRE(limitcounter::scripts::all.size() >= 4);
  for (const Script* script : limitcounter::scripts::all) {
    INFO(script->name);
    const Reply loaded = redis.command({"SCRIPT", "LOAD", std::string(script->source)});
    CHECK(loaded.as_string() == script->sha1);
    CHECK(script->source.substr(0, 3) == "-- "); // every script opens with its contract
  }
}

TEST_CASE("EVALSHA recovers from an empty script cache by itself", "[redis][scripts]") {
  Redis redis(shared_server().options());
  const std::string key = unique_prefix() + "probe";
  redis.command({"SCRIPT", "FLUSH"});
  CHECK(redis.eval(probe, {key}, probe_args()).at(1).as_integer() == 1);
  redis.command({"SCRIPT", "FLUSH"});
  CHECK(redis.eval(probe, {key}, probe_args()).at(1).as_integer() == 2);

  // a pipeline with NOSCRIPT in the middle: the lost calls run once, in order
  std::vector<ScriptCall> calls;
  for (int i = 0; i < 100; ++i) {
    calls.push_back({&probe, {key}, probe_args()});
  }
  calls[50].args[1] = "-x"; // a call the script itself fails on: its error stays in place
  redis.command({"SCRIPT", "FLUSH"});
  const auto replies = redis.eval_pipeline(calls);
  REQUIRE(replies.size() == 100);
  CHECK(replies[0].at(1).as_integer() == 3);
  CHECK(replies[50].is_error());
  CHECK(replies[99].at(1).as_integer() == 101);
  CHECK(redis.command({"HGET", key, "f"}).as_string() == "101:1010");
}

TEST_CASE("a script error is Outcome::failed and names the script", "[redis][scripts]") {
  Redis redis(shared_server().options());
  auto args = probe_args();
  args[1] = "not-a-number";
  const Error e = error_of([&] { redis.eval(probe, {unique_prefix() + "k"}, args); });
  CHECK(e.code() == errc::server_error);
  CHECK(e.outcome() == Outcome::failed);
  CHECK_THAT(e.what(), Catch::Contains("counter_add"));
}

TEST_CASE("connections killed by the server are replaced without an error", "[redis][fault]") {
  Redis redis(shared_server().options());
  const std::string key = unique_prefix() + "killed";
  for (int round = 0; round < 3; ++round) {
    redis.command({"SET", key, std::to_string(round)});
    // kill every normal client but the one asking
    redis.command({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});
    Redis other(shared_server().options());
    other.command(
        {"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"}); // now the first pool's too
    CHECK(redis.command({"GET", key}).as_string() == std::to_string(round));
  }
}

TEST_CASE("a timed-out connection says the outcome is unknown and is discarded", "[redis][fault]") {
  RedisServer server({"--enable-debug-command", "yes"});
  RedisOptions options = server.options();
  options.command_timeout = 100ms;
  options.pool_size = 1;
  Redis redis(options);
  Redis admin(server.options());
  const std::string key = unique_prefix() + "slow";
  // both connections exist and the script is cached before the server sleeps
  redis.eval(probe, {key + "-warm"}, probe_args());
  admin.command({"PING"});

  std::thread sleeper([&] { CHECK_FALSE(admin.command({"DEBUG", "SLEEP", "0.5"}).is_error()); });
  std::this_thread::sleep_for(50ms);
  const Error e = error_of([&] { redis.eval(probe, {key}, probe_args()); });
  sleeper.join();
  CHECK(e.code() == errc::timeout);
  CHECK(e.outcome() == Outcome::unknown);
  // The call did run once the server woke up ("may have run" was right), and the late reply
  // is never read as the answer to a later command: that connection is gone.
  CHECK(admin.command({"HGET", key, "f"}).as_string() == "1:10");
  CHECK(redis.command({"PING"}).as_string() == "PONG");
  CHECK(redis.eval(probe, {key}, probe_args()).at(1).as_integer() == 2);
}

TEST_CASE("an exhausted pool refuses without sending", "[redis][fault]") {
  RedisServer server;
  RedisOptions options = server.options();
  options.pool_size = 1;
  options.pool_wait_timeout = 50ms;
  Redis redis(options);
  std::thread blocker([&] { redis.command({"BLPOP", "never-filled", "0.6"}); });
  std::this_thread::sleep_for(100ms);
  const Error e = error_of([&] { redis.command({"SET", "x", "1"}); });
  blocker.join();
  CHECK(e.code() == errc::pool_exhausted);
  CHECK(e.outcome() == Outcome::not_sent);
  CHECK(redis.command({"EXISTS", "x"}).as_integer() == 0);
}

TEST_CASE("AUTH with a password, an ACL user, and SELECT", "[redis][auth]") {
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

TEST_CASE("a stopped server is connect_failed and nothing was sent", "[redis][fault]") {
  auto server = std::make_unique<RedisServer>();
  RedisOptions options = server->options();
  options.connect_timeout = 200ms;
  server->stop();
  const Error e = error_of([&] { Redis(options).command({"PING"}); });
  CHECK(e.code() == errc::connect_failed);
  CHECK(e.outcome() == Outcome::not_sent);
  CHECK_THAT(e.what(), Catch::Contains("127.0.0.1:" + std::to_string(options.port)));
}

TEST_CASE("a restarted server is reconnected to, and scripts reload", "[redis][fault]") {
  RedisServer server;
  Redis redis(server.options());
  const std::string key = unique_prefix() + "restart";
  CHECK(redis.eval(probe, {key}, probe_args()).at(1).as_integer() == 1);
  server.restart(); // no persistence: an empty server without scripts
  CHECK(redis.eval(probe, {key}, probe_args()).at(1).as_integer() == 1);
}

TEST_CASE("many threads share one Redis", "[redis][concurrency]") {
  Redis redis(shared_server().options());
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
