// The fault proxy of the test harness: each fault it injects, proven from the server's side
// (the key the command writes, INFO commandstats) through a direct connection to the server.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include <limitcounter/error.hpp>
#include <limitcounter/redis.hpp>

#include "support/fault_proxy.hpp"
#include "support/probe.hpp"
#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using namespace limitcounter;
using namespace limitcounter::testing;

namespace {

// An error reply the library hands to the caller as it is (BUSY, LOADING and the like it
// retries): the proxy answers it in the server's place, so the command did not run.
const std::string final_error = "ERR injected by the fault proxy";

// A private server (its commandstats count only this test's commands), a proxy in front of
// it, a client through the proxy with a short timeout, and a direct connection to check.
struct Rig {
  RedisServer server;
  FaultProxy proxy{server};
  Redis direct{server.options()};
  Redis client{client_options(proxy)};
  std::string key = unique_prefix() + "k";

  static RedisOptions client_options(const FaultProxy& proxy) {
    RedisOptions options = proxy.options();
    options.command_timeout = 200ms; // a lost reply is a timeout soon
    options.pool_size = 2;
    return options;
  }

  /// `calls` of `command` (lower case) in INFO commandstats: how often the server ran it.
  std::int64_t calls(const std::string& command) { return command_calls(direct, command); }

  bool key_exists() { return direct.command({"EXISTS", key}).as_integer() == 1; }

  /// Loads the probe script through the proxy, so that a faulted call is one EVALSHA.
  void warm_script() { client.eval(probe, {key + "-warm"}, probe_args()); }
};

} // namespace

TEST_CASE("fault proxy: commands and pipelines pass through in order", "[fault][proxy]") {
  Rig rig;
  CHECK(rig.client.command({"SET", rig.key, "v"}).as_string() == "OK");
  CHECK(rig.direct.command({"GET", rig.key}).as_string() == "v");
  rig.warm_script();

  // a pipeline in one write, with one call answered by the proxy itself in the middle
  const std::string odd = rig.key + "-odd";
  rig.proxy.add_rule({script_call_with_key_prefix(odd), Fault::error_reply, 1, {}, final_error});
  std::vector<ScriptCall> calls(100, ScriptCall{&probe, {rig.key + "-p"}, probe_args()});
  calls[50].keys = {odd};
  const std::vector<Reply> replies = rig.client.eval_pipeline(calls);
  REQUIRE(replies.size() == 100);
  CHECK(replies[0].at(1).as_integer() == 1);
  CHECK(replies[49].at(1).as_integer() == 50);
  CHECK(replies[50].is_error());
  CHECK(replies[50].as_string() == final_error);
  CHECK(replies[99].at(1).as_integer() == 99);
  CHECK(rig.direct.command({"HGET", rig.key + "-p", "f"}).as_string() == "99:990");
  CHECK(rig.direct.command({"EXISTS", odd}).as_integer() == 0);
  CHECK(rig.proxy.injected(Fault::error_reply) == 1);
}

TEST_CASE("fault proxy: drop_reply, the script ran and its reply was lost", "[fault][proxy]") {
  Rig rig;
  rig.warm_script();
  const std::int64_t before = rig.calls("evalsha");
  rig.proxy.add_rule({script_call_with_key_prefix(rig.key), Fault::drop_reply});

  const Error e = error_of([&] { rig.client.eval(probe, {rig.key}, probe_args()); });
  CHECK(e.code() == errc::timeout);
  CHECK(e.outcome() == Outcome::unknown);
  REQUIRE(eventually([&] { return rig.key_exists(); }));
  CHECK(rig.direct.command({"HGET", rig.key, "f"}).as_string() == "1:10");
  CHECK(rig.calls("evalsha") == before + 1);
  CHECK(rig.proxy.injected(Fault::drop_reply) == 1);
  // the rule is spent: the same call goes through again (and adds a second time: counter_add
  // is not idempotent, which is why the money paths carry ids)
  CHECK(rig.client.eval(probe, {rig.key}, probe_args()).at(1).as_integer() == 2);
}

TEST_CASE("fault proxy: delay_reply holds a reply, in order", "[fault][proxy]") {
  Rig rig;
  SECTION("shorter than the timeout: the reply arrives intact") {
    rig.proxy.add_rule({command_named("set"), Fault::delay_reply, 2, 50ms});
    CHECK(rig.client.command({"SET", rig.key, "v"}).as_string() == "OK");
    // a pipeline whose first reply is held: the others wait behind it
    rig.warm_script();
    rig.proxy.add_rule({script_call_with_key_prefix(rig.key + "-p"), Fault::delay_reply, 1, 50ms});
    std::vector<ScriptCall> calls(10, ScriptCall{&probe, {rig.key + "-p"}, probe_args()});
    const std::vector<Reply> replies = rig.client.eval_pipeline(calls);
    for (std::size_t i = 0; i < replies.size(); ++i) {
      CHECK(replies[i].at(1).as_integer() == static_cast<std::int64_t>(i) + 1);
    }
    CHECK(rig.key_exists());
    CHECK(rig.proxy.injected(Fault::delay_reply) == 2);
  }
  SECTION("past the timeout: the command ran, the caller hears unknown") {
    const std::int64_t before = rig.calls("set");
    rig.proxy.add_rule({command_named("SET"), Fault::delay_reply, 1, 1000ms});
    const Error e = error_of([&] { rig.client.command({"SET", rig.key, "v"}); });
    CHECK(e.code() == errc::timeout);
    CHECK(e.outcome() == Outcome::unknown);
    REQUIRE(eventually([&] { return rig.key_exists(); }));
    CHECK(rig.calls("set") == before + 1);
  }
}

TEST_CASE("fault proxy: cut_mid_reply, the command ran and the connection broke",
          "[fault][proxy]") {
  Rig rig;
  rig.warm_script();
  const std::int64_t before = rig.calls("evalsha");
  rig.proxy.add_rule({script_call_with_key_prefix(rig.key), Fault::cut_mid_reply});
  const Error e = error_of([&] { rig.client.eval(probe, {rig.key}, probe_args()); });
  CHECK((e.code() == errc::io_error || e.code() == errc::protocol_error));
  CHECK(e.outcome() == Outcome::unknown);
  CHECK(rig.direct.command({"HGET", rig.key, "f"}).as_string() == "1:10");
  CHECK(rig.calls("evalsha") == before + 1);
  CHECK(rig.proxy.injected(Fault::cut_mid_reply) == 1);
}

TEST_CASE("fault proxy: close_before_forward and blackhole, the command did not run",
          "[fault][proxy]") {
  Rig rig;
  rig.client.command({"PING"});
  const std::int64_t before = rig.calls("set");
  const std::size_t forwarded = rig.proxy.forwarded();
  SECTION("close_before_forward: the client sees a broken connection") {
    rig.proxy.add_rule({command_named("SET"), Fault::close_before_forward});
    const Error e = error_of([&] { rig.client.command({"SET", rig.key, "v"}); });
    CHECK(e.code() == errc::io_error);
    CHECK(e.outcome() == Outcome::unknown); // the client cannot tell: it sent the request
    CHECK(rig.proxy.injected(Fault::close_before_forward) == 1);
  }
  SECTION("blackhole: the client times out") {
    rig.proxy.add_rule({command_named("SET"), Fault::blackhole});
    const Error e = error_of([&] { rig.client.command({"SET", rig.key, "v"}); });
    CHECK(e.code() == errc::timeout);
    CHECK(e.outcome() == Outcome::unknown);
    CHECK(rig.proxy.injected(Fault::blackhole) == 1);
  }
  CHECK_FALSE(rig.key_exists());
  CHECK(rig.calls("set") == before);
  CHECK(rig.proxy.forwarded() == forwarded);
  CHECK(rig.client.command({"SET", rig.key, "w"}).as_string() == "OK"); // a new connection
  CHECK(rig.calls("set") == before + 1);
}

TEST_CASE("fault proxy: error_reply answers in the server's place", "[fault][proxy]") {
  Rig rig;
  rig.warm_script();
  SECTION("an error the library does not retry reaches the caller; the command did not run") {
    const std::int64_t before = rig.calls("set");
    rig.proxy.add_rule({command_named("SET"), Fault::error_reply, 1, {}, final_error});
    const Reply reply = rig.client.command({"SET", rig.key, "v"});
    REQUIRE(reply.is_error());
    CHECK(reply.as_string() == final_error);
    CHECK_FALSE(rig.key_exists());
    CHECK(rig.calls("set") == before);
  }
  SECTION("LOADING once: the library tries again and the script runs once") {
    const std::int64_t before = rig.calls("evalsha");
    rig.proxy.add_rule({script_call_with_key_prefix(rig.key), Fault::error_reply});
    CHECK(rig.client.eval(probe, {rig.key}, probe_args()).at(1).as_integer() == 1);
    CHECK(rig.calls("evalsha") == before + 1);
    CHECK(rig.direct.command({"HGET", rig.key, "f"}).as_string() == "1:10");
  }
  CHECK(rig.proxy.injected(Fault::error_reply) == 1);
}

TEST_CASE("fault proxy: refused connections and cut connections", "[fault][proxy]") {
  Rig rig;
  SECTION("stop_listening: connect fails, nothing was sent") {
    rig.proxy.refuse_connections(true);
    const Error e = error_of([&] { rig.client.command({"SET", rig.key, "v"}); });
    CHECK(e.code() == errc::connect_failed);
    CHECK(e.outcome() == Outcome::not_sent);
  }
  SECTION("accept_and_close: the connection closes before the request") {
    rig.proxy.refuse_connections(true, Refusal::accept_and_close);
    const Error e = error_of([&] { rig.client.command({"SET", rig.key, "v"}); });
    // The connection's server check (INFO) meets the close, so the SET is never sent (before
    // the check, the SET was the first request and the close made it "may have run").
    CHECK(e.code() == errc::connect_failed);
    CHECK(e.outcome() == Outcome::not_sent);
    CHECK_THAT(e.what(), Catch::Contains("server check"));
  }
  CHECK_FALSE(rig.key_exists());
  CHECK(rig.calls("set") == 0);
  rig.proxy.refuse_connections(false);
  CHECK(rig.client.command({"SET", rig.key, "v"}).as_string() == "OK");

  // cut_all: the server sees the proxy's connections close; the client reconnects
  const auto clients = [&] {
    const std::string list = rig.direct.command({"CLIENT", "LIST"}).as_string();
    return std::count(list.begin(), list.end(), '\n');
  };
  REQUIRE(clients() == 2); // the direct connection and the proxy's one for the client
  rig.proxy.cut_all();
  CHECK(eventually([&] { return clients() == 1; }));
  CHECK(rig.client.command({"GET", rig.key}).as_string() == "v");
}

TEST_CASE("fault proxy: a seeded schedule gives the same faults for the same seed",
          "[fault][proxy]") {
  Rig rig;
  // error_reply only, so that one connection carries the whole sequence
  const auto run = [&](std::uint64_t seed, const std::string& prefix) {
    FaultMix mix;
    mix.probability = {{Fault::error_reply, 0.5}};
    mix.matches = command_named("SET");
    mix.errors = {final_error}; // an error the library does not retry: one draw per SET
    rig.proxy.schedule(seed, mix);
    std::vector<bool> failed;
    for (int i = 0; i < 40; ++i) {
      failed.push_back(rig.client.command({"SET", prefix + std::to_string(i), "v"}).is_error());
    }
    rig.proxy.clear();
    return failed;
  };
  const std::vector<bool> first = run(42, rig.key + "-a:");
  const std::vector<bool> again = run(42, rig.key + "-b:");
  const std::vector<bool> other = run(7, rig.key + "-c:");
  CHECK(first == again);
  CHECK(first != other);
  const auto failures = std::count(first.begin(), first.end(), true) +
                        std::count(again.begin(), again.end(), true) +
                        std::count(other.begin(), other.end(), true);
  CHECK(rig.proxy.injected(Fault::error_reply) == static_cast<std::size_t>(failures));
  // what the server ran is exactly what was not faulted
  CHECK(rig.calls("set") == 120 - failures);
  for (int i = 0; i < 40; ++i) {
    CHECK(rig.direct.command({"EXISTS", rig.key + "-a:" + std::to_string(i)}).as_integer() ==
          (first[static_cast<std::size_t>(i)] ? 0 : 1));
  }
}
