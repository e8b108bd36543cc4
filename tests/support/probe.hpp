#pragma once
// Helpers shared by the connection-level tests.

#include <chrono>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/error.hpp>
#include <limitcounter/limit_counter.hpp>
#include <limitcounter/redis.hpp>

#include "limit_counter/codec/decide_arguments.hpp"
#include "limit_counter/declared_keys.hpp"

namespace limitcounter::testing {

/// counter_add: a real embedded script with a simple contract, used as a probe call.
inline const Script& probe = scripts::counter_add;

/// Arguments of one probe call: count 1, amount 10 into field "f", expiring in 2100.
inline std::vector<std::string> probe_args() { return {"f", "1", "10", "4102444800000"}; }

/// What `limits` builds its decide calls with (default options: grace 1 h, horizon 24 h, holds
/// 15 min), at `now` by the client's clock: for a test that sends a lua/limit.lua call itself.
inline detail::DecideContext decide_context(const LimitCounter& limits, TimePoint now) {
  detail::DecideContext context;
  context.calendar = &limits.calendar();
  context.keys = &limits.keys();
  context.window_grace = std::chrono::hours(1);
  context.replay_horizon = std::chrono::hours(24);
  context.reservation_timeout = std::chrono::minutes(15);
  context.now = now;
  return context;
}

/// Field `name` of a limits transaction's record at `key` (a share's or a cluster's home record)
/// as lua/limit.lua's inspect names it: state, amount, refunded, hexp, plan, begun, open, ...;
/// empty if the record or the field is absent.
inline std::string record_field(Redis& redis, const std::string& key, const std::string& name) {
  const Reply reply = detail::eval_declaring(redis, {&scripts::limit, {key}, {"inspect"}});
  if (reply.at(0).as_string() == "missing") {
    return {};
  }
  std::map<std::string, std::string> fields;
  const auto pairs = static_cast<std::size_t>(reply.at(2).to_int64());
  for (std::size_t i = 0; i < pairs; ++i) {
    fields[reply.at(3 + 2 * i).as_string()] = reply.at(4 + 2 * i).as_string();
  }
  const auto found = fields.find(name);
  return found != fields.end() ? found->second : std::string();
}

/// The limitcounter::Error `action` throws; fails the test if it throws none.
template <typename Action> Error error_of(Action&& action) {
  try {
    action();
  } catch (const Error& e) {
    return e;
  }
  FAIL("no error");
  throw std::logic_error("unreachable");
}

/// `calls` of `command` (lower case, e.g. "evalsha") in INFO commandstats: how often the
/// server `redis` talks to ran it. The server's side of a fault test.
inline long long command_calls(Redis& redis, const std::string& command) {
  const std::string stats = redis.command({"INFO", "commandstats"}).as_string();
  const std::string tag = "cmdstat_" + command + ":calls=";
  const auto at = stats.find(tag);
  return at == std::string::npos ? 0 : std::stoll(stats.substr(at + tag.size()));
}

/// Script calls the server `redis` talks to has run: EVALSHA and FCALL (the library's scripts
/// that come as a Functions library run by FCALL; see `Script::library`).
inline long long script_calls(Redis& redis) {
  return command_calls(redis, "evalsha") + command_calls(redis, "fcall");
}

/// Polls `condition` every 10 ms for up to `limit` (10 s by default: a loaded CI machine);
/// returns its last value.
template <typename Condition>
bool eventually(Condition&& condition,
                std::chrono::steady_clock::duration limit = std::chrono::seconds{10}) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  return condition();
}

/// A server that holds every write command (scripts included) of every client until
/// `release()` or `limit` has passed, while reads and `CLIENT` commands still answer
/// (`CLIENT PAUSE <limit> WRITE`). In force once the constructor returns, so a script call
/// made afterwards certainly waits: a stalled server without the race of a `DEBUG SLEEP`
/// sent from another thread. A held call whose client went away meanwhile may still run
/// when released: the "may have run" of a timeout.
class WritesHeld {
public:
  WritesHeld(Redis& admin, std::chrono::milliseconds limit) : admin_(admin) {
    REQUIRE(
        admin_.command({"CLIENT", "PAUSE", std::to_string(limit.count()), "WRITE"}).as_string() ==
        "OK");
  }
  WritesHeld(const WritesHeld&) = delete;
  WritesHeld& operator=(const WritesHeld&) = delete;
  ~WritesHeld() {
    try {
      release();
    } catch (const Error&) {
      // the pause ends by itself after `limit`
    }
  }

  /// Lets the held calls run (in the order they came), before any command sent after this.
  void release() {
    if (!released_) {
      released_ = true;
      admin_.command({"CLIENT", "UNPAUSE"});
    }
  }

private:
  Redis& admin_;
  bool released_ = false;
};

} // namespace limitcounter::testing
