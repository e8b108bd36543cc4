// Connection-level faults: killed connections, timeouts, exhaustion, restarts.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <thread>

#include <unistd.h>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/error.hpp>
#include <limitcounter/redis.hpp>

#include "support/fault_proxy.hpp"
#include "support/probe.hpp"
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

using limitcounter::testing::error_of;
using limitcounter::testing::eventually;
using limitcounter::testing::probe;
using limitcounter::testing::probe_args;
using limitcounter::testing::WritesHeld;

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
  RedisServer server;
  RedisOptions options = server.options();
  options.command_timeout = 100ms;
  options.pool_size = 1;
  Redis redis(options);
  Redis admin(server.options());
  const std::string key = unique_prefix() + "slow";
  // both connections exist and the script is cached before the server sleeps
  redis.eval(probe, {key + "-warm"}, probe_args());
  admin.command({"PING"});

  WritesHeld stalled(admin, 2000ms);
  const Error e = error_of([&] { redis.eval(probe, {key}, probe_args()); });
  stalled.release();
  CHECK(e.code() == errc::timeout);
  CHECK(e.outcome() == Outcome::unknown);
  // "May have run": the server may run the call when it wakes, or drop it with the closed
  // connection. Either way it ran at most once, and its late reply is never read as the
  // answer to a later command: that connection is gone.
  const Reply after = admin.command({"HGET", key, "f"});
  const std::int64_t ran = after.is_nil() ? 0 : 1;
  CHECK((after.is_nil() || after.as_string() == "1:10"));
  CHECK(redis.command({"PING"}).as_string() == "PONG");
  CHECK(redis.eval(probe, {key}, probe_args()).at(1).as_integer() == ran + 1);
}

TEST_CASE("an exhausted pool refuses without sending", "[redis][fault]") {
  RedisServer server;
  RedisOptions options = server.options();
  options.pool_size = 1;
  options.pool_wait_timeout = 50ms;
  Redis redis(options);
  Redis admin(server.options());
  std::thread blocker([&] { redis.command({"BLPOP", "never-filled", "1"}); });
  // the pool's only connection is taken once the server sees it blocked
  REQUIRE(eventually([&] {
    return admin.command({"CLIENT", "LIST"}).as_string().find("cmd=blpop") != std::string::npos;
  }));
  const Error e = error_of([&] { redis.command({"SET", "x", "1"}); });
  blocker.join();
  CHECK(e.code() == errc::pool_exhausted);
  CHECK(e.outcome() == Outcome::not_sent);
  CHECK(redis.command({"EXISTS", "x"}).as_integer() == 0);
}

TEST_CASE("many threads on an exhausted pool fail fast, none of them sent", "[redis][fault]") {
  RedisServer server;
  RedisOptions options = server.options();
  options.pool_size = 4;
  options.pool_wait_timeout = 20ms;
  Redis redis(options);
  std::atomic<int> served{0};
  std::atomic<int> exhausted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 32; ++t) {
    threads.emplace_back([&] {
      try {
        redis.command({"BLPOP", "never-filled", "1"});
        ++served;
      } catch (const Error& e) {
        CHECK(e.code() == errc::pool_exhausted);
        CHECK(e.outcome() == Outcome::not_sent);
        ++exhausted;
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  CHECK(served + exhausted == 32);
  CHECK(served <= 8); // at most two rounds of 4 fit in the one second the first four held them
  CHECK(exhausted >= 24);
  CHECK(redis.command({"PING"}).as_string() == "PONG"); // the pool is whole again
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

namespace {

// The count of error replies starting with `code` the server has sent (INFO errorstats).
long long errors_answered(Redis& admin, const std::string& code) {
  const std::string stats = admin.command({"INFO", "errorstats"}).as_string();
  const auto at = stats.find("errorstat_" + code + ":count=");
  return at == std::string::npos ? 0 : std::stoll(stats.substr(at + code.size() + 17));
}

// Whether a call answered `code` (returned in place by older code, thrown by newer).
bool answers(Redis& redis, const std::string& code) {
  try {
    const Reply reply = redis.command({"EXISTS", "any"});
    return reply.is_error() && reply.as_string().compare(0, code.size(), code) == 0;
  } catch (const Error& e) {
    return std::string(e.what()).find(code) != std::string::npos;
  }
}

// Three probe calls to a server that refuses with `code`: each ends with not_sent and names
// the reply, and then the breaker is open. Before, BUSY was a script failure and LOADING
// six attempts, and either way the breaker saw a live server and never opened.
void each_call_refused_then_breaker_opens(RedisOptions options, const std::string& code,
                                          const std::string& key) {
  options.command_timeout = 100ms; // the call budget: retries stop after it
  options.breaker_failures = 3;
  options.breaker_pause = 60s;
  Redis redis(options);
  for (int call = 0; call < 3; ++call) {
    const Error e = error_of([&] { redis.eval(probe, {key}, probe_args()); });
    CHECK(e.outcome() == Outcome::not_sent);
    CHECK(e.code() == errc::server_error);
    CHECK_THAT(e.what(), Catch::Contains(code));
  }
  const Error open = error_of([&] { redis.eval(probe, {key}, probe_args()); });
  CHECK(open.code() == errc::circuit_open);
}

} // namespace

TEST_CASE("a server answering BUSY: calls end in their budget, nothing ran, the breaker opens",
          "[redis][fault][budget]") {
  RedisServer server({"--busy-reply-threshold", "10"});
  RedisOptions admin_options = server.options();
  admin_options.breaker_failures = 0;
  admin_options.call_budget = 1ms; // the wait below polls; it need not retry
  Redis admin(admin_options);
  // Connected before the server is busy: a new connection's server check would be answered
  // BUSY too, and SCRIPT KILL below must go out on a connection that exists.
  REQUIRE(admin.command({"PING"}).as_string() == "PONG");
  const std::string key = unique_prefix() + "busy";
  // A script that never ends: past busy-reply-threshold the server answers BUSY to others.
  RedisOptions blocker_options = server.options();
  blocker_options.command_timeout = 60s;
  Redis blocker(blocker_options);
  std::thread busy([&] {
    try {
      blocker.command({"EVAL", "while true do end", "0"});
    } catch (const Error&) {
      // killed by SCRIPT KILL: the script's error reply is returned, not thrown; a timeout
      // would mean the kill failed, which the CHECK below reports
    }
  });
  REQUIRE(eventually([&] { return answers(admin, "BUSY"); }));
  each_call_refused_then_breaker_opens(server.options(), "BUSY", key);
  // a pipeline none of whose calls ran is refused as a whole (before: BUSY in place)
  RedisOptions no_breaker = server.options();
  no_breaker.command_timeout = 100ms;
  no_breaker.breaker_failures = 0;
  Redis piped(no_breaker);
  const Error refused = error_of([&] {
    piped.eval_pipeline({{&probe, {key}, probe_args()}, {&probe, {key}, probe_args()}});
  });
  CHECK(refused.outcome() == Outcome::not_sent);
  CHECK_THAT(refused.what(), Catch::Contains("BUSY"));
  CHECK(admin.command({"SCRIPT", "KILL"}).as_string() == "OK");
  busy.join();
  // the server's side: it refused with BUSY, and no probe call wrote anything
  CHECK(errors_answered(admin, "BUSY") >= 3);
  CHECK(admin.command({"EXISTS", key}).as_integer() == 0);
}

TEST_CASE("a server answering LOADING: calls end in their budget, nothing ran, the breaker opens",
          "[redis][fault][budget]") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("limitcounter-loading-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  RedisServer server({"--dir", dir.string(), "--enable-debug-command", "yes",
                      "--loading-process-events-interval-bytes", "1024"});
  RedisOptions admin_options = server.options();
  admin_options.breaker_failures = 0;
  admin_options.call_budget = 1ms;
  Redis admin(admin_options);
  const std::string key = unique_prefix() + "loading";
  // DEBUG RELOAD saves and loads the data again, slowly (key-load-delay per key): the
  // server answers LOADING to others meanwhile.
  REQUIRE(admin.command({"DEBUG", "POPULATE", "20000"}).as_string() == "OK");
  REQUIRE(admin.command({"CONFIG", "SET", "key-load-delay", "200"}).as_string() == "OK");
  RedisOptions reloader_options = server.options();
  reloader_options.command_timeout = 60s;
  Redis reloader(reloader_options);
  std::thread reload([&] { reloader.command({"DEBUG", "RELOAD"}); });
  REQUIRE(eventually([&] { return answers(admin, "LOADING"); }));
  each_call_refused_then_breaker_opens(server.options(), "LOADING", key);
  reload.join();
  CHECK(errors_answered(admin, "LOADING") >= 3);
  CHECK(admin.command({"EXISTS", key}).as_integer() == 0);
  server.kill();
  std::filesystem::remove_all(dir);
}

TEST_CASE("a NOSCRIPT answered after the call's budget is thrown as not sent", "[redis][fault]") {
  RedisServer server;
  Redis admin(server.options());
  admin.command({"SCRIPT", "FLUSH"});
  limitcounter::testing::FaultProxy proxy(server);
  // the NOSCRIPT comes 30 ms late, past a 1 ms budget: no time is left to load the script
  proxy.add_rule({limitcounter::testing::command_named("EVALSHA"),
                  limitcounter::testing::Fault::delay_reply, 1, 30ms});
  RedisOptions options = proxy.options();
  options.command_timeout = 2000ms;
  options.call_budget = 1ms;
  Redis redis(options);
  const std::string key = unique_prefix() + "noscript";
  const Error e = error_of([&] { redis.eval(probe, {key}, probe_args()); });
  CHECK(e.code() == errc::server_error);
  CHECK(e.outcome() == Outcome::not_sent);
  CHECK(std::string(e.what()).find("NOSCRIPT") != std::string::npos);
  CHECK(admin.command({"EXISTS", key}).as_integer() == 0);
}
