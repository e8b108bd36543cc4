// The exhausted cache against a reply that comes late: Redis judges a hold expired by the time
// the call carries, so the cache must weigh a denial by that time too, not by when its reply
// came back.
#include <catch2/catch.hpp>

#include <limitcounter/limitcounter.hpp>

#include "support/fault_proxy.hpp"
#include "support/proxied_server.hpp"

using namespace std::chrono_literals;
using limitcounter::Decision;
using limitcounter::LimitCounter;
using limitcounter::LimitCounterOptions;
using limitcounter::Period;
using limitcounter::Redis;
using limitcounter::RedisOptions;
using limitcounter::Rule;
using limitcounter::RuleSet;
using limitcounter::Transaction;
using limitcounter::testing::Fault;
using limitcounter::testing::FaultRule;
using limitcounter::testing::ProxiedServer;
using limitcounter::testing::script_call_with_key_prefix;

TEST_CASE("exhausted cache: a denial given while this process's hold was live is not cached, "
          "however late its reply comes",
          "[fault][exhausted_cache]") {
  ProxiedServer fixture;
  const RedisOptions options = fixture.through_proxy(6s); // the held reply is not a timeout
  LimitCounterOptions counter_options;
  counter_options.key_prefix = fixture.prefix;
  counter_options.reservation_timeout = 2s;
  counter_options.exhausted_cache.enabled = true;
  counter_options.exhausted_cache.max_staleness = 1h; // a cached denial would outlive the test
  LimitCounter limits(Redis(options), limitcounter::Calendar("UTC"), counter_options);
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_count(1)));
  const auto payment = [](const std::string& id) {
    return Transaction{id, {{"merchant", "m1"}}, 100};
  };
  REQUIRE(limits.reserve(payment("held")).allowed()); // the only room, held for 2 s

  // This consume leaves while the hold is live (Redis denies it), and its reply is held back
  // until after the hold expired.
  FaultRule late;
  late.matches = script_call_with_key_prefix(counter_options.key_prefix);
  late.fault = Fault::delay_reply;
  late.delay = 3s;
  fixture.proxy.add_rule(late);
  const Decision denied = limits.consume(payment("while-held"));
  REQUIRE(fixture.proxy.injected(Fault::delay_reply) == 1);
  REQUIRE_FALSE(denied.allowed());
  CHECK_FALSE(denied.cached);

  // The hold has expired: Redis releases it and allows the next consume. Had the late denial
  // been cached, this process would deny it for an hour without asking.
  const Decision after = limits.consume(payment("after"));
  CHECK_FALSE(after.cached);
  CHECK(after.allowed());
}
