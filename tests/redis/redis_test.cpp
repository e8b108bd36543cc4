#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include <unistd.h>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/error.hpp>
#include <limitcounter/redis.hpp>

#include "redis/connection.hpp"
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
using limitcounter::testing::shared_server;
using limitcounter::testing::test_options;
using limitcounter::testing::unique_prefix;

using limitcounter::testing::error_of;
using limitcounter::testing::probe;
using limitcounter::testing::probe_args;

namespace {

// A script made up by a test: Script only views its strings, so they live here. The SHA1
// comes from the server (redis.sha1hex), not from SCRIPT LOAD, so the script stays unknown
// to the server's cache until the library loads it.
struct TestScript {
  std::string name;
  std::string source;
  std::string sha1;
  Script script() const { return Script{name, source, sha1}; }
};

TestScript make_script(Redis& redis, std::string name, const std::string& body) {
  TestScript made;
  made.name = std::move(name);
  // a unique first line: no other test, nor an earlier run on this server, has this SHA1
  made.source = "-- test script " + unique_prefix() + "\n" + body;
  made.sha1 =
      redis.command({"EVAL", "return redis.sha1hex(ARGV[1])", "0", made.source}).as_string();
  return made;
}

} // namespace

TEST_CASE("every embedded script's SHA1 is what SCRIPT LOAD returns", "[redis][scripts]") {
  Redis redis(test_options());
  REQUIRE(limitcounter::scripts::all.size() >= 4);
  for (const Script* script : limitcounter::scripts::all) {
    INFO(script->name);
    const Reply loaded = redis.command({"SCRIPT", "LOAD", std::string(script->source)});
    CHECK(loaded.as_string() == script->sha1);
    // every script opens with its contract (after the line that binds a library's locals)
    const std::string_view text = script->library.empty()
                                      ? script->source
                                      : script->source.substr(script->source.find('\n') + 1);
    CHECK(text.substr(0, 3) == "-- ");
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

TEST_CASE("a server that needs a password says so, naming the server, for every kind of call",
          "[redis][auth][standalone]") {
  RedisServer server({"--requirepass", "n0auth-secret-pw"});
  RedisOptions options = server.options(); // no password given
  options.breaker_failures = 0;
  Redis redis(options);
  const std::string where = "127.0.0.1:" + std::to_string(server.port());
  const auto check = [&](const Error& e) {
    // before: "script counter_add on ...: NOAUTH Authentication required." (server_error,
    // failed), and commands returned the NOAUTH reply as if it were theirs
    CHECK(e.code() == errc::connect_failed);
    CHECK(e.outcome() == Outcome::not_sent);
    CHECK_THAT(e.what(), Catch::Contains("requires authentication") && Catch::Contains(where) &&
                             !Catch::Contains("n0auth-secret-pw"));
  };
  const std::string key = unique_prefix() + "noauth";
  check(error_of([&] { redis.eval(probe, {key}, probe_args()); }));
  check(error_of([&] { redis.command({"GET", key}); }));
  check(error_of([&] { redis.eval_pipeline({{&probe, {key}, probe_args()}}); }));
  // the server's side: nothing was written
  options.password = "n0auth-secret-pw";
  CHECK(Redis(options).command({"EXISTS", key}).as_integer() == 0);
}

TEST_CASE("many threads share one Redis", "[redis][concurrency]") {
  Redis redis(test_options());
  const std::string key = unique_prefix() + "shared";
  std::vector<std::thread> threads;
  threads.reserve(16);
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

TEST_CASE("commands round-trip every reply type, binary-safe", "[redis]") {
  Redis redis(test_options());
  const std::string key = unique_prefix() + "round-trip";
  const char raw[] = "a\0b\r\n$3\r\n*1\r\n";
  const std::string binary(raw, sizeof(raw) - 1); // with its NUL, as a bulk string may be
  REQUIRE(binary.size() == 13);

  const Reply set = redis.command({"SET", key, binary});
  CHECK(set.type() == Reply::Type::status);
  CHECK(set.as_string() == "OK");
  CHECK(redis.command({"GET", key}).as_string() == binary);
  CHECK(redis.command({"GET", key + "-absent"}).is_nil());
  CHECK(redis.command({"SET", key + "-empty", ""}).as_string() == "OK");
  CHECK(redis.command({"GET", key + "-empty"}).as_string().empty());
  CHECK(redis.command({"INCRBY", key + "-n", "-5"}).as_integer() == -5);
  CHECK(redis.command({"GET", key + "-n"}).to_int64() == -5);

  CHECK(redis.command({"RPUSH", key + "-list", "a", "", binary}).as_integer() == 3);
  const Reply list = redis.command({"LRANGE", key + "-list", "0", "-1"});
  REQUIRE(list.as_array().size() == 3);
  CHECK(list.at(0).as_string() == "a");
  CHECK(list.at(1).as_string().empty());
  CHECK(list.at(2).as_string() == binary);
  CHECK(redis.command({"LRANGE", key + "-absent", "0", "-1"}).as_array().empty());

  const std::string big(1 << 20, 'x');
  redis.command({"SET", key + "-big", big});
  CHECK(redis.command({"GET", key + "-big"}).as_string() == big);

  // error replies come back in place, not thrown, and the connection stays good
  const Reply wrong = redis.command({"INCR", key});
  CHECK(wrong.is_error());
  CHECK_THAT(wrong.as_string(), Catch::StartsWith("ERR"));
  CHECK(redis.command({"LPUSH", key, "x"}).as_string().rfind("WRONGTYPE", 0) == 0);
  CHECK(redis.command({"NO-SUCH-COMMAND", key}).is_error());
  CHECK(redis.command({"GET", key}).as_string() == binary);
}

TEST_CASE("eval runs a script, loads it on NOSCRIPT, and checks its SHA1",
          "[redis][scripts][standalone]") {
  Redis redis(shared_server().options());
  const std::string key = unique_prefix() + "eval";
  const TestScript counting =
      make_script(redis, "counting", "return {KEYS[1], ARGV[1], redis.call('INCR', KEYS[1])}");
  const Script script = counting.script();
  CHECK(redis.command({"SCRIPT", "EXISTS", counting.sha1}).at(0).as_integer() == 0);

  // never loaded: NOSCRIPT, SCRIPT LOAD, EVALSHA again; the script ran once
  Reply reply = redis.eval(script, {key}, {"arg"});
  CHECK(reply.at(0).as_string() == key);
  CHECK(reply.at(1).as_string() == "arg");
  CHECK(reply.at(2).as_integer() == 1);
  CHECK(redis.command({"SCRIPT", "EXISTS", counting.sha1}).at(0).as_integer() == 1);
  CHECK(redis.eval(script, {key}, {"arg"}).at(2).as_integer() == 2);

  // an emptied script cache is transparent, and the call still runs exactly once
  redis.command({"SCRIPT", "FLUSH"});
  CHECK(redis.eval(script, {key}, {"arg"}).at(2).as_integer() == 3);

  // a script whose embedded SHA1 is not its source's: refused, nothing ran
  const std::string zeros(40, '0');
  const Script wrong_sha{"wrong_sha", counting.source, zeros};
  const Error mismatch = error_of([&] { redis.eval(wrong_sha, {key}, {"arg"}); });
  CHECK(mismatch.code() == errc::protocol_error);
  CHECK_THAT(mismatch.what(), Catch::Contains("wrong_sha") && Catch::Contains(counting.sha1));
  CHECK(redis.command({"GET", key}).as_string() == "3");

  // an error reply of the script: server_error, Outcome::failed, with the server's text
  const TestScript failing =
      make_script(redis, "failing", "return redis.error_reply('LIMIT boom')");
  const Error failed = error_of([&] { redis.eval(failing.script(), {key}, {}); });
  CHECK(failed.code() == errc::server_error);
  CHECK(failed.outcome() == Outcome::failed);
  CHECK_THAT(failed.what(), Catch::Contains("failing") && Catch::Contains("LIMIT boom"));

  // a script that returns nothing, and one without keys
  const TestScript nothing = make_script(redis, "nothing", "return nil");
  CHECK(redis.eval(nothing.script(), {}, {}).is_nil());
}

TEST_CASE("a pipeline of 100 calls answers in order, reloading scripts and keeping errors in place",
          "[redis][scripts][pipeline]") {
  Redis redis(test_options());
  const std::string key = unique_prefix() + "pipeline";
  const char* body = "if ARGV[1] == 'bad' then return redis.error_reply('ERR bad call') end\n"
                     "return {ARGV[1], redis.call('RPUSH', KEYS[1], ARGV[1])}";
  const TestScript loaded = make_script(redis, "loaded", body);
  const TestScript unloaded = make_script(redis, "unloaded", body);
  redis.eval(loaded.script(), {key + "-warm"}, {"warm"}); // in the cache before the pipeline
  const Script first = loaded.script();
  const Script second = unloaded.script(); // not: its calls come back NOSCRIPT

  std::vector<ScriptCall> calls;
  calls.reserve(100);
  for (int i = 0; i < 100; ++i) {
    calls.push_back({i % 3 == 1 ? &second : &first, {key}, {std::to_string(i)}});
  }
  calls[49].args = {"bad"}; // a call of the unloaded script that fails once it runs
  calls[51].args = {"bad"}; // and one of the loaded script

  const std::vector<Reply> replies = redis.eval_pipeline(calls);
  REQUIRE(replies.size() == 100);
  for (int i = 0; i < 100; ++i) {
    INFO(i);
    if (i == 49 || i == 51) {
      REQUIRE(replies[i].is_error());
      CHECK(replies[i].as_string() == "ERR bad call");
    } else {
      CHECK(replies[i].at(0).as_string() == std::to_string(i));
    }
  }
  // every call that does not fail ran exactly once
  std::vector<std::string> ran;
  const Reply pushed = redis.command({"LRANGE", key, "0", "-1"});
  for (const Reply& item : pushed.as_array()) {
    ran.push_back(item.as_string());
  }
  std::sort(ran.begin(), ran.end());
  std::vector<std::string> expected;
  for (int i = 0; i < 100; ++i) {
    if (i != 49 && i != 51) {
      expected.push_back(std::to_string(i));
    }
  }
  std::sort(expected.begin(), expected.end());
  CHECK(ran == expected);

  CHECK(redis.eval_pipeline({}).empty());
  const Error no_script = error_of([&] { redis.eval_pipeline({ScriptCall{}}); });
  CHECK(no_script.code() == errc::invalid_argument);
}

TEST_CASE("a pooled connection killed by the server is replaced; nothing is lost",
          "[redis][fault][standalone]") {
  RedisOptions options = shared_server().options();
  options.pool_size = 1;
  Redis redis(options);
  Redis admin(shared_server().options());
  const std::string key = unique_prefix() + "killed";
  for (int round = 0; round < 3; ++round) {
    const std::int64_t id = redis.command({"CLIENT", "ID"}).as_integer();
    CHECK(admin.command({"CLIENT", "KILL", "ID", std::to_string(id)}).as_integer() == 1);
    CHECK(redis.command({"INCR", key}).as_integer() == round + 1);
    CHECK(redis.command({"CLIENT", "ID"}).as_integer() != id);
  }
}

TEST_CASE("a request sent to a closed connection may have run; a broken one never raises SIGPIPE",
          "[redis][fault][standalone]") {
  // What the pool's check of an idle connection cannot see: the server closes it between
  // the check and the request. The request was sent, so the outcome is unknown.
  const RedisOptions options = shared_server().options();
  Redis admin(options);
  auto connection = limitcounter::detail::Connection::open(options, options.host, options.port);
  const std::int64_t id = connection->run({"CLIENT", "ID"}).as_integer();
  admin.command({"CLIENT", "KILL", "ID", std::to_string(id)});
  std::this_thread::sleep_for(100ms); // let the server's FIN arrive
  const Error sent = error_of([&] { connection->run({"PING"}); });
  CHECK(sent.code() == errc::io_error);
  CHECK(sent.outcome() == Outcome::unknown);
  CHECK(connection->broken());

  // The server answered that PING with a reset. Writing now fails before a byte leaves:
  // nothing was sent, and a write() there would have killed this process with SIGPIPE.
  std::this_thread::sleep_for(100ms);
  // It had served requests, so it is reported as a stale pooled connection: the router
  // sends such a request once more on another connection.
  try {
    connection->run({"PING"});
    FAIL("no error");
  } catch (const limitcounter::detail::StaleConnection& e) {
    CHECK(e.code() == errc::io_error);
    CHECK(e.outcome() == Outcome::not_sent);
  }
}

TEST_CASE("URIs: password, ACL user and db; a wrong password is never echoed",
          "[redis][auth][standalone]") {
  RedisServer server(
      {"--requirepass", "pw-of-default", "--user", "limits", "on", ">pw-of-limits", "~*", "+@all"});
  const std::string at = "@127.0.0.1:" + std::to_string(server.port());
  Redis by_password(std::string_view("redis://:pw-of-default" + at + "/3"));
  CHECK(by_password.command({"ACL", "WHOAMI"}).as_string() == "default");
  CHECK(by_password.command({"CLIENT", "INFO"}).as_string().find(" db=3 ") != std::string::npos);

  Redis by_user(std::string_view("redis://limits:pw%2Dof%2Dlimits" + at + "/2"));
  CHECK(by_user.command({"ACL", "WHOAMI"}).as_string() == "limits");
  CHECK(by_user.command({"CLIENT", "INFO"}).as_string().find(" db=2 ") != std::string::npos);

  for (const std::string& uri :
       {"redis://limits:not-the-pw-1" + at, "redis://:not-the-pw-2" + at}) {
    INFO(uri);
    const Error e = error_of([&] { Redis(std::string_view(uri)).command({"PING"}); });
    CHECK(e.code() == errc::connect_failed);
    CHECK(e.outcome() == Outcome::not_sent);
    CHECK_THAT(e.what(), Catch::Contains("127.0.0.1:" + std::to_string(server.port())));
    CHECK_THAT(e.what(), !Catch::Contains("not-the-pw"));
  }

  // SELECT of a database the server does not have
  RedisOptions no_such_db = server.options();
  no_such_db.password = "pw-of-default";
  no_such_db.db = 99;
  const Error e = error_of([&] { Redis(no_such_db).command({"PING"}); });
  CHECK(e.code() == errc::connect_failed);
  CHECK_THAT(e.what(), Catch::Contains("SELECT") && !Catch::Contains("pw-of-default"));
}

TEST_CASE("a unix socket URI with a db", "[redis][standalone]") {
  const std::string path = "/tmp/limitcounter-test-" + std::to_string(getpid()) + "-" +
                           unique_prefix().substr(1) + "sock";
  {
    RedisServer server({"--unixsocket", path, "--unixsocketperm", "700"});
    Redis redis(std::string_view("unix://" + path + "?db=2"));
    CHECK(redis.command({"SET", "k", "v"}).as_string() == "OK");
    CHECK(redis.command({"CLIENT", "INFO"}).as_string().find(" db=2 ") != std::string::npos);
    server.stop();
    const Error e = error_of([&] { redis.command({"GET", "k"}); });
    CHECK(e.code() == errc::connect_failed);
    CHECK_THAT(e.what(), Catch::Contains(path));
  }
  std::remove(path.c_str());
}

TEST_CASE("a stopped server: connect_failed, not sent; back when it is back",
          "[redis][fault][standalone]") {
  RedisServer server;
  RedisOptions options = server.options();
  options.connect_timeout = 500ms;
  Redis redis(options);
  CHECK(redis.command({"PING"}).as_string() == "PONG"); // a pooled connection exists
  server.stop();
  const Error e = error_of([&] { redis.command({"PING"}); });
  CHECK(e.code() == errc::connect_failed);
  CHECK(e.outcome() == Outcome::not_sent);
  CHECK_THAT(e.what(), Catch::Contains("127.0.0.1:" + std::to_string(server.port())));
  server.restart();
  CHECK(redis.command({"PING"}).as_string() == "PONG");
}
