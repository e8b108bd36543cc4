#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>
#include <thread>
#include <variant>

#include <unistd.h>

#include <limitcounter/limitcounter.hpp>

#include "support/probe.hpp"
#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using limitcounter::Decision;
using limitcounter::Dimension;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::FailurePolicy;
using limitcounter::LimitCounter;
using limitcounter::LimitCounterOptions;
using limitcounter::Outcome;
using limitcounter::Period;
using limitcounter::Redis;
using limitcounter::RedisOptions;
using limitcounter::Rule;
using limitcounter::RuleSet;
using limitcounter::Transaction;
using limitcounter::Usage;
using limitcounter::testing::RedisServer;

namespace {

Transaction payment(const std::string& id, std::int64_t amount) {
  Transaction tx;
  tx.id = id;
  tx.attributes = {{"merchant", "m1"}};
  tx.amount = amount;
  return tx;
}

errc code_of(const Error& e) { return static_cast<errc>(e.code().value()); }

// Limits on `server` (every call tries Redis: no breaker) whose one rule, at most 10 a day per
// merchant, lets this node allow half of it alone while Redis is away.
std::unique_ptr<LimitCounter> half_local_share(const RedisServer& server) {
  RedisOptions options = server.options();
  options.connect_timeout = 200ms;
  options.breaker_failures = 0;
  auto limits = std::make_unique<LimitCounter>(Redis(options), limitcounter::Calendar("UTC"));
  limits->set_rules(RuleSet().add(Rule("day")
                                      .where("merchant")
                                      .per(Period::day)
                                      .max_count(10)
                                      .on_redis_failure(FailurePolicy::local, 0.5)));
  return limits;
}

} // namespace

TEST_CASE("a dead Redis: failure policies decide, degraded, and the breaker fails fast",
          "[fault]") {
  auto server = std::make_unique<RedisServer>();
  RedisOptions options = server->options();
  options.connect_timeout = 200ms;
  options.breaker_failures = 3;
  options.breaker_pause = 300ms;
  Redis redis(options);
  LimitCounter limits(redis, limitcounter::Calendar("UTC"));
  const auto rules = [](FailurePolicy a, FailurePolicy b) {
    return RuleSet()
        .add(Rule("day").where("merchant").per(Period::day).max_amount(1000).on_redis_failure(a))
        .add(Rule("month")
                 .where("merchant")
                 .per(Period::month)
                 .max_amount(9000)
                 .on_redis_failure(b));
  };
  limits.set_rules(rules(FailurePolicy::allow, FailurePolicy::allow));
  REQUIRE(limits.consume(payment("before", 10)).allowed());
  server->stop();

  const Decision open = limits.consume(payment("t1", 10));
  CHECK(open.allowed());
  CHECK(open.degraded);
  limits.set_rules(rules(FailurePolicy::allow, FailurePolicy::deny)); // deny beats allow
  const Decision closed = limits.consume(payment("t2", 10));
  CHECK_FALSE(closed.allowed());
  CHECK(closed.degraded);
  CHECK(closed.denial->rule == "month");
  CHECK(closed.denial->metric == limitcounter::Metric::unavailable);
  limits.set_rules(rules(FailurePolicy::raise, FailurePolicy::deny)); // raise beats both
  const auto error_of = [&](const std::string& id) {
    try {
      limits.consume(payment(id, 10));
    } catch (const Error& e) {
      return e;
    }
    FAIL("no error");
    throw std::logic_error("unreachable");
  };
  const Error third = error_of("t3");
  CHECK(code_of(third) == errc::connect_failed);
  CHECK(third.outcome() == Outcome::not_sent);
  // three failures in a row opened the breaker: this call does not even try to connect
  const Error fourth = error_of("t4");
  CHECK(code_of(fourth) == errc::circuit_open);
  CHECK(fourth.outcome() == Outcome::not_sent);

  // Redis comes back on the same port; after the pause a probe closes the breaker.
  server->restart();
  std::this_thread::sleep_for(350ms);
  CHECK(limits.consume(payment("after", 10)).allowed());
  CHECK_FALSE(limits.consume(payment("after2", 10)).degraded);
}

TEST_CASE("a restarted server keeps every decision: retries after a restart apply once",
          "[fault]") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("limitcounter-aof-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  {
    RedisServer server(std::vector<std::string>{"--appendonly", "yes", "--appendfsync", "always",
                                                "--dir", dir.string()});
    Redis redis(server.options());
    LimitCounter limits(redis, limitcounter::Calendar("UTC"));
    limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_count(1000)));
    for (int i = 0; i < 50; ++i) {
      REQUIRE(limits.consume(payment("r" + std::to_string(i), 10)).allowed());
    }
    server.restart(); // the script cache is empty now; the data came back from the AOF
    for (int i = 0; i < 50; ++i) {
      const Decision again = limits.consume(payment("r" + std::to_string(i), 10));
      REQUIRE(again.replayed);
    }
    CHECK(limits.usage("merchant", Dimension{"m1"}, Period::day) == Usage{50, 500});
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("Redis down at start-up: construction works, calls fail clearly", "[fault]") {
  auto server = std::make_unique<RedisServer>();
  RedisOptions options = server->options();
  server.reset(); // killed: nothing listens on the port any more
  options.connect_timeout = 100ms;
  Redis redis(options); // lazy: no connection yet
  LimitCounter limits(redis, limitcounter::Calendar("UTC"));
  try {
    limits.add("channel", Dimension{"Ali"}, {Period::day}, 1, 1);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(code_of(e) == errc::connect_failed);
    CHECK(e.outcome() == Outcome::not_sent);
  }
}

TEST_CASE("the observer sees decisions, near-limit events and errors", "[fault][observer]") {
  RedisServer server;
  std::ostringstream lines;
  LimitCounterOptions options;
  options.observer = std::make_shared<limitcounter::StreamObserver>(lines);
  LimitCounter limits(Redis(server.options()), limitcounter::Calendar("UTC"), options);
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_count(10)));
  for (int i = 0; i < 11; ++i) {
    limits.consume(payment("o" + std::to_string(i), 1));
  }
  const std::string log = lines.str();
  CHECK(log.find("decision tx=o0 verdict=allowed") != std::string::npos);
  CHECK(log.find("near-limit tx=o8 rule=day") != std::string::npos); // 9 of 10
  CHECK(log.find("near-limit tx=o7") == std::string::npos);
  CHECK(log.find("decision tx=o10 verdict=denied rule=day") != std::string::npos);
  CHECK(log.find("latency_us=") != std::string::npos);
}

TEST_CASE("a local share: bounded allowances while Redis is down, reported when it is back",
          "[fault][local]") {
  auto server = std::make_unique<RedisServer>();
  RedisOptions options = server->options();
  options.connect_timeout = 200ms;
  options.breaker_failures = 0; // every call tries Redis: this test is about the ledger
  std::ostringstream lines;
  LimitCounterOptions limit_options;
  limit_options.observer = std::make_shared<limitcounter::StreamObserver>(lines);
  LimitCounter limits(Redis(options), limitcounter::Calendar("UTC"), limit_options);
  limits.set_rules(RuleSet().add(Rule("day")
                                     .where("merchant")
                                     .per(Period::day)
                                     .max_count(100)
                                     .max_amount(10'000)
                                     .on_redis_failure(FailurePolicy::local, 0.1)));
  CHECK_THROWS_AS(RuleSet().add(Rule("bad")
                                    .where("merchant")
                                    .per(Period::day)
                                    .max_count(1)
                                    .on_redis_failure(FailurePolicy::local, 1.5)),
                  Error);
  REQUIRE(limits.consume(payment("up-0", 5)).allowed());
  server->stop();

  int allowed = 0;
  for (int i = 0; i < 12; ++i) {
    const Decision d = limits.consume(payment("down-" + std::to_string(i), 5));
    CHECK(d.degraded);
    allowed += d.allowed() ? 1 : 0;
  }
  CHECK(allowed == 10); // 10 % of 100 transactions

  server->restart();
  const Decision back = limits.consume(payment("up-1", 5));
  CHECK(back.allowed());
  CHECK_FALSE(back.degraded);
  // the restarted server (no persistence) starts empty: it now holds what this node
  // allowed alone (10) and the call after
  CHECK(limits.usage("merchant", Dimension{"m1"}, Period::day) == Usage{10 + 1, 55});
  CHECK(lines.str().find("local-usage-reported") != std::string::npos);
}

TEST_CASE("a local share holds per window across any number of outages", "[fault][local]") {
  auto server = std::make_unique<RedisServer>();
  const auto owned = half_local_share(*server);
  LimitCounter& limits = *owned;
  const auto allowed_while_down = [&](const std::string& outage, int attempts) {
    int allowed = 0;
    for (int i = 0; i < attempts; ++i) {
      const Decision d = limits.consume(payment(outage + std::to_string(i), 1));
      REQUIRE(d.degraded);
      allowed += d.allowed() ? 1 : 0;
    }
    return allowed;
  };
  server->stop();
  CHECK(allowed_while_down("first-", 3) == 3);
  server->restart();
  REQUIRE(limits.consume(payment("between", 1)).allowed()); // reports the 3
  CHECK(limits.usage("merchant", Dimension{"m1"}, Period::day) == Usage{4, 4});
  server->stop();
  // the share is 5 for the whole day: 2 are left of it, not 5 again
  CHECK(allowed_while_down("second-", 5) == 2);
  server->restart();
  REQUIRE(limits.consume(payment("after", 1)).allowed());
  CHECK(limits.usage("merchant", Dimension{"m1"}, Period::day) == Usage{2 + 1, 3});
}

TEST_CASE("consume_many decides like consume while Redis is away: the local share, reported after",
          "[fault][local]") {
  auto server = std::make_unique<RedisServer>();
  const auto owned = half_local_share(*server);
  LimitCounter& limits = *owned;
  server->stop();
  std::vector<Transaction> batch;
  for (int i = 0; i < 8; ++i) {
    batch.push_back(payment("many-" + std::to_string(i), 1));
  }
  int allowed = 0;
  for (const auto& result : limits.consume_many(batch)) {
    REQUIRE(std::holds_alternative<Decision>(result));
    CHECK(std::get<Decision>(result).degraded);
    allowed += std::get<Decision>(result).allowed() ? 1 : 0;
  }
  CHECK(allowed == 5); // half of 10, as single calls would get

  server->restart();
  const auto back = limits.consume_many({payment("many-after", 1)});
  REQUIRE(std::holds_alternative<Decision>(back.front()));
  CHECK_FALSE(std::get<Decision>(back.front()).degraded);
  // what this node allowed alone was reported by the batch, as by a single call
  CHECK(limits.usage("merchant", Dimension{"m1"}, Period::day) == Usage{5 + 1, 6});
}
