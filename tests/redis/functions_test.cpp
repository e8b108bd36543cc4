// The scripts that come as a Redis Functions library (Script::library) against real servers:
// run by FCALL, loaded again where the library is gone, and run by EVALSHA where the server
// refuses FCALL or FUNCTION LOAD (renamed away, an ACL without them).
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include <limitcounter/calendar.hpp>
#include <limitcounter/limit_counter.hpp>
#include <limitcounter/redis.hpp>
#include <limitcounter/rule.hpp>

#include "limit_counter/codec/decide_arguments.hpp"
#include "limit_counter/codec/decide_batch.hpp"
#include "limitcounter/detail/lua_scripts.hpp"
#include "support/probe.hpp"
#include "support/redis_server.hpp"

using limitcounter::LimitCounter;
using limitcounter::Redis;
using limitcounter::RedisOptions;
using limitcounter::Reply;
using limitcounter::Script;
using limitcounter::Transaction;
using limitcounter::testing::command_calls;
using limitcounter::testing::RedisServer;

namespace {

// A limit of 1000 a day per merchant.
void limit_merchants_per_day(LimitCounter& limits) {
  limits.set_rules(limitcounter::RuleSet().add(
      limitcounter::Rule("day").where("merchant").per(limitcounter::Period::day).max_amount(1000)));
}

// `n` consumes of 10 each, ids "<prefix>-<i>", one merchant: every one allowed.
void consume_all(LimitCounter& limits, const std::string& prefix, int n) {
  for (int i = 0; i < n; ++i) {
    INFO(prefix << " " << i);
    CHECK(limits.consume(Transaction{prefix + "-" + std::to_string(i), {{"merchant", "m"}}, 10})
              .allowed());
  }
}

// The merchant's usage in the day window, from the server.
std::int64_t amount_used(LimitCounter& limits) {
  return limits.usage("merchant", limitcounter::Dimension{"m"}, limitcounter::Period::day).amount;
}

} // namespace

TEST_CASE("every script that has a library loads under its versioned name and runs by FCALL "
          "as by EVALSHA",
          "[redis][scripts][functions][standalone]") {
  RedisServer server;
  Redis admin(server.options());
  std::size_t libraries = 0;
  for (const Script* script : limitcounter::scripts::all) {
    if (script->library.empty()) {
      CHECK(script->function_name.empty());
      continue;
    }
    ++libraries;
    INFO(script->name);
    CHECK(script->function_name.substr(0, 13 + script->name.size()) ==
          "limitcounter_" + std::string(script->name));
    CHECK(admin.command({"FUNCTION", "LOAD", std::string(script->library)}).as_string() ==
          script->function_name);
  }
  REQUIRE(libraries >= 1);
  // the same call both ways: lua/limit.lua's inspect of a record that is not there
  const std::string key = limitcounter::testing::unique_prefix() + "absent";
  const Script& limit = limitcounter::scripts::limit;
  const Reply by_function =
      admin.command({"FCALL", std::string(limit.function_name), "1", key, "inspect"});
  const Reply by_sha = admin.eval(limit, {key}, {"inspect"});
  CHECK(by_function.debug_string() == by_sha.debug_string());
  CHECK(by_function.debug_string().find("missing") != std::string::npos);
}

// A server of its own, its library loaded by one consume ("before-0") of 1000 a day per merchant.
struct AfterOneConsume {
  RedisServer server;
  Redis admin{server.options()};
  Redis redis{server.options()};
  LimitCounter limits{redis, limitcounter::Calendar("Asia/Shanghai")};
  AfterOneConsume() {
    limit_merchants_per_day(limits);
    consume_all(limits, "before", 1);
  }
};

TEST_CASE_METHOD(
    AfterOneConsume,
    "a library flushed from the server is loaded again, by a single call and a pipeline",
    "[redis][scripts][functions][standalone]") {
  CHECK(command_calls(admin, "fcall") >= 1);
  CHECK(command_calls(admin, "evalsha") == 0);
  const long long loads = command_calls(admin, "function|load");
  CHECK(loads == 1);

  admin.command({"FUNCTION", "FLUSH"});
  consume_all(limits, "after-flush", 2);
  CHECK(command_calls(admin, "function|load") == loads + 1);

  // a pipeline of calls that all meet the missing library loads it once and runs each once
  admin.command({"FUNCTION", "FLUSH"});
  std::vector<Transaction> batch;
  for (int i = 0; i < 100; ++i) {
    batch.push_back(Transaction{"many-" + std::to_string(i), {{"merchant", "m"}}, 1});
  }
  for (const auto& item : limits.consume_many(batch)) {
    REQUIRE(std::holds_alternative<limitcounter::Decision>(item));
    CHECK(std::get<limitcounter::Decision>(item).allowed());
  }
  CHECK(command_calls(admin, "function|load") == loads + 2);
  CHECK(amount_used(limits) == 3 * 10 + 100);
  CHECK(command_calls(admin, "evalsha") == 0);
}

TEST_CASE("a server that refuses FCALL or FUNCTION LOAD runs the scripts by EVALSHA",
          "[redis][scripts][functions][standalone]") {
  SECTION("FCALL renamed away") {
    RedisServer server({"--rename-command", "fcall", ""});
    Redis admin(server.options());
    Redis redis(server.options());
    LimitCounter limits(redis, limitcounter::Calendar("Asia/Shanghai"));
    limit_merchants_per_day(limits);
    consume_all(limits, "renamed", 3);
    CHECK(amount_used(limits) == 30);
    CHECK(command_calls(admin, "evalsha") >= 3);
  }
  SECTION("an ACL user without function|load") {
    RedisServer server;
    Redis admin(server.options());
    REQUIRE(admin
                .command(
                    {"ACL", "SETUSER", "nofunctions", "on", ">pw", "~*", "+@all", "-function|load"})
                .as_string() == "OK");
    RedisOptions options = server.options();
    options.user = "nofunctions";
    options.password = "pw";
    Redis redis(options);
    LimitCounter limits(redis, limitcounter::Calendar("Asia/Shanghai"));
    limit_merchants_per_day(limits);
    consume_all(limits, "acl", 3);
    CHECK(amount_used(limits) == 30);
    CHECK(command_calls(admin, "evalsha") >= 3);
    CHECK(admin.command({"FUNCTION", "LIST"}).as_array().empty());
  }
}

// Redis refuses a function that may write when its memory is full (maxmemory, noeviction), as
// it did not refuse a script by EVALSHA that only reads: a check and a record's inspection are
// called by the library's no-writes function, and still answer.
TEST_CASE_METHOD(AfterOneConsume,
                 "when Redis's memory is full, a check and a record's inspection still answer",
                 "[redis][scripts][functions][standalone]") {
  REQUIRE(admin.command({"CONFIG", "SET", "maxmemory", "1"}).as_string() == "OK");
  const Transaction next{"when-full", {{"merchant", "m"}}, 10};
  const limitcounter::Decision check = limits.check(next);
  CHECK(check.allowed());
  CHECK(check.dry_run);
  const auto record = limits.transaction_record("before-0");
  REQUIRE(record);
  CHECK(record->amount == 10);
  // a consume is refused, having written nothing
  const limitcounter::Error refused =
      limitcounter::testing::error_of([&] { limits.consume(next); });
  CHECK_THAT(refused.what(), Catch::Contains("OOM"));
  CHECK(refused.outcome() == limitcounter::Outcome::failed);
  REQUIRE(admin.command({"CONFIG", "SET", "maxmemory", "0"}).as_string() == "OK");
  CHECK(amount_used(limits) == 10);
  CHECK(!limits.transaction_record("when-full"));
  CHECK(command_calls(admin, "evalsha") == 0);
}

// A library's chunk-level tables outlive a call: lua/limit.lua keeps decoded rule programs there
// (at most 64, by their bytes) and reuses its reply and scratch tables. Nothing a call leaves
// may reach the next call's answer.
TEST_CASE("a library call answers by its own program and reply, whatever the calls before it",
          "[redis][scripts][functions][standalone]") {
  RedisServer server;
  Redis redis(server.options());
  LimitCounter limits(redis, limitcounter::Calendar("UTC"));
  using limitcounter::Period;
  using limitcounter::Rule;
  const auto context = limitcounter::testing::decide_context(limits, limitcounter::Clock::now());
  const auto consume = [&](const std::string& id, std::int64_t amount,
                           const std::vector<const Rule*>& rules) {
    const Transaction tx{id, {{"merchant", "m-" + id}, {"user", "u-" + id}}, amount};
    const auto call =
        limitcounter::detail::build_decide(limitcounter::LimitOp::consume, tx, {}, rules, context);
    return redis.eval(limitcounter::scripts::limit, call.keys, call.args);
  };

  SECTION("a reply as long as its own, after a longer one") {
    const Rule day = Rule("day").where("merchant").per(Period::day).max_amount(1000);
    const Rule month = Rule("month").where("merchant").per(Period::month).max_amount(1000);
    const Rule user_day = Rule("user-day").where("user").per(Period::day).max_amount(1000);
    const Rule user_year = Rule("user-year").where("user").per(Period::year).max_amount(1000);
    // {code, c, then per counter its count and amount}
    CHECK(consume("four", 10, {&day, &month, &user_day, &user_year}).as_array().size() == 10);
    const Reply one = consume("one", 10, {&day});
    REQUIRE(one.as_array().size() == 4);
    CHECK(one.at(0).as_integer() == 1); // allowed
    CHECK(one.at(3).as_integer() == 10);
    CHECK(consume("none", 10, {}).as_array().size() == 2);
  }
  SECTION("each of more programs than the library keeps decoded decides by its own limits") {
    std::vector<Rule> rules;
    for (int limit = 1; limit <= 70; ++limit) {
      rules.push_back(Rule("day").where("merchant").per(Period::day).max_amount(limit));
    }
    for (int round = 0; round < 2; ++round) { // (the second: every program decoded again)
      for (int limit = 1; limit <= 70; ++limit) {
        INFO("round " << round << ", limit " << limit);
        const std::string id = std::to_string(round) + "-" + std::to_string(limit);
        const Rule* rule = &rules[static_cast<std::size_t>(limit - 1)];
        CHECK(consume(id + "-over", limit + 1, {rule}).at(0).as_integer() == 2); // denied
        CHECK(consume(id + "-at", limit, {rule}).at(0).as_integer() == 1);       // allowed
      }
    }
  }
  CHECK(command_calls(redis, "evalsha") == 0);
}

// Decide calls built by hand, to be sent as they are or spoilt: a day's limit of 1000 per
// merchant, on a server of their own.
struct HandBuiltCalls {
  RedisServer server;
  Redis redis{server.options()};
  LimitCounter limits{redis, limitcounter::Calendar("UTC")};
  const limitcounter::Rule day =
      limitcounter::Rule("day").where("merchant").per(limitcounter::Period::day).max_amount(1000);
  const limitcounter::detail::DecideContext context =
      limitcounter::testing::decide_context(limits, limitcounter::Clock::now());
};

// What the client sends is checked before anything is written, also what a library keeps: a
// rule program is decoded once per server, and a rule naming a counter the call has not would
// read another call's totals.
TEST_CASE_METHOD(
    HandBuiltCalls,
    "a decide call with a malformed program or counter set is refused, nothing written",
    "[redis][scripts][functions][standalone]") {
  const Transaction tx{"malformed", {{"merchant", "m"}}, 10};
  auto call =
      limitcounter::detail::build_decide(limitcounter::LimitOp::consume, tx, {}, {&day}, context);
  const std::vector<std::string> keys = call.keys; // record, counter set, counter, hold set
  // refused as a call of many would be, and as a lone consume (op one), nothing written: the
  // keys `absent` are still not there
  const auto refused = [&](const std::string& why, const std::vector<std::string>& absent) {
    for (const auto& args :
         {call.args, limitcounter::detail::lone_consume_args(std::vector(call.args))}) {
      INFO(args.front());
      const limitcounter::Error error = limitcounter::testing::error_of(
          [&] { redis.eval(limitcounter::scripts::limit, call.keys, args); });
      CHECK_THAT(error.what(), Catch::Contains(why));
      for (const std::string& key : absent) {
        INFO(key);
        CHECK(redis.command({"EXISTS", key}).as_integer() == 0);
      }
    }
  };

  SECTION("a rule naming counter 2 of 1") {
    std::string& program = call.args.at(6);
    // ... r = 1, then the rule: its counter (a fixint), max count -1, max amount (an int64)
    REQUIRE(program.size() > 11);
    REQUIRE(program[program.size() - 11] == '\x01');
    program[program.size() - 11] = '\x02';
    refused("names counter 2 of 1", keys);
  }
  SECTION("a counter set's text without its expiry") {
    std::string& text = call.args.at(11);
    text = "1" + text.substr(text.find('\n'));
    refused("has no expiry", keys);
  }
  SECTION("times that PXAT or PX would refuse: a counter set's expiry 0, a record lifetime of 20 "
          "digits") {
    std::string& text = call.args.at(11);
    text = "1 0" + text.substr(text.find('\n'));
    refused("has no expiry", keys);
    call.args.at(11) =
        limitcounter::detail::build_decide(limitcounter::LimitOp::consume, tx, {}, {&day}, context)
            .args.at(11);
    call.args.at(3) = "99999999999999999999";
    refused("not a number of ms", keys);
  }
  SECTION("a counter set whose name holds another text") {
    REQUIRE(redis.command({"SET", keys[1], "another set"}).as_string() == "OK");
    refused("collide", {keys[0], keys[2], keys[3]});
    CHECK(redis.command({"GET", keys[1]}).as_string() == "another set");
  }
}

// A batch decides its transactions one after the other, so whatever would fail at a later one
// (its arguments, a counter set, a hold set) is checked before the first one writes.
TEST_CASE_METHOD(HandBuiltCalls,
                 "a batch call fails before its first write, whichever transaction it fails at",
                 "[redis][scripts][functions][standalone]") {
  const auto batch_of = [&](std::int64_t first, std::int64_t second) {
    limitcounter::detail::DecideBatch batch;
    for (const auto& [id, amount] : {std::pair{"first", first}, std::pair{"second", second}}) {
      auto call = limitcounter::detail::build_decide(limitcounter::LimitOp::consume,
                                                     Transaction{id, {{"merchant", "m"}}, amount},
                                                     {}, {&day}, context);
      batch.add(std::move(call.keys), std::move(call.args));
    }
    return batch.take();
  };
  std::vector<std::string> keys;
  std::vector<std::string> args;
  std::tie(keys, args) = batch_of(10, 777);
  // KEYS: the two records, the counter set, the counter, its hold set
  REQUIRE(keys.size() == 5);
  const auto run = [&] { return redis.eval(limitcounter::scripts::limit, keys, args); };
  const auto no_record_nor_counter = [&] {
    for (const std::string& key : {keys[0], keys[1], keys[3]}) {
      INFO(key);
      CHECK(redis.command({"EXISTS", key}).as_integer() == 0);
    }
  };

  SECTION("a key short of what the call names") {
    keys.pop_back();
    const limitcounter::Error error = limitcounter::testing::error_of(run);
    CHECK_THAT(error.what(), Catch::Contains("4 keys where the call names 5"));
    no_record_nor_counter();
  }
  SECTION("the second transaction's amount is not a number") {
    std::string& transactions = args.back(); // (MessagePack strings: "777" is there as it is)
    const auto at = transactions.find("777");
    REQUIRE(at != std::string::npos);
    transactions.replace(at, 3, "7x7");
    const limitcounter::Error error = limitcounter::testing::error_of(run);
    CHECK_THAT(error.what(), Catch::Contains("transaction 2") && Catch::Contains("7x7"));
    no_record_nor_counter();
    CHECK(redis.command({"EXISTS", keys[2]}).as_integer() == 0);
  }
  SECTION("the first is denied, and the second's counter set name holds another text") {
    std::tie(keys, args) = batch_of(2000, 10);
    REQUIRE(redis.command({"SET", keys[2], "another set"}).as_string() == "OK");
    const limitcounter::Error error = limitcounter::testing::error_of(run);
    CHECK_THAT(error.what(), Catch::Contains("collide"));
    no_record_nor_counter(); // (no denial record either)
    CHECK(redis.command({"GET", keys[2]}).as_string() == "another set");
  }
  SECTION("the second is denied, and its hold set is not a sorted set") {
    std::tie(keys, args) = batch_of(10, 2000);
    REQUIRE(redis.command({"SET", keys[4], "not a hold set"}).as_string() == "OK");
    // the denial's sweep leaves it alone, and both transactions are decided
    const Reply reply = run();
    REQUIRE(reply.as_array().size() == 10);
    CHECK(reply.at(0).as_integer() == 1); // allowed: 1 counter, 1 and 10
    CHECK(reply.at(3).as_integer() == 10);
    CHECK(reply.at(4).as_integer() == 2); // denied: 1 counter, as found, rule 1, by amount
    CHECK(reply.at(6).as_integer() == 1);
    CHECK(reply.at(8).as_integer() == 1);
    CHECK(redis.command({"GET", keys[0]}).as_string().rfind("c ", 0) == 0);
    CHECK(redis.command({"GET", keys[1]}).as_string().rfind("d ", 0) == 0);
    CHECK(redis.command({"GET", keys[4]}).as_string() == "not a hold set");
  }
}

TEST_CASE_METHOD(HandBuiltCalls,
                 "a reservation whose hold set is not a sorted set is refused, nothing written",
                 "[redis][scripts][functions][standalone]") {
  const auto call = limitcounter::detail::build_decide(limitcounter::LimitOp::reserve,
                                                       Transaction{"held", {{"merchant", "m"}}, 10},
                                                       {}, {&day}, context);
  REQUIRE(call.keys.size() == 4); // record, counter set, counter, hold set
  REQUIRE(redis.command({"SET", call.keys[3], "not a hold set"}).as_string() == "OK");
  const limitcounter::Error error = limitcounter::testing::error_of(
      [&] { redis.eval(limitcounter::scripts::limit, call.keys, call.args); });
  CHECK_THAT(error.what(), Catch::Contains("WRONGTYPE"));
  for (std::size_t k = 0; k < 3; ++k) {
    INFO(call.keys[k]);
    CHECK(redis.command({"EXISTS", call.keys[k]}).as_integer() == 0);
  }
}
