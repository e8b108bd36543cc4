#pragma once
// A LimitCounter through a fault proxy in front of each node of the shared test cluster, its
// transactions spread over two slots (shapes dept and merchant), for the tests that lose the
// replies of a fan-out's steps.

#include <chrono>
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include <limitcounter/limitcounter.hpp>

#include "redis/key_slot.hpp"
#include "support/fault_proxy.hpp"
#include "support/probe.hpp"
#include "support/redis_cluster.hpp"

namespace limitcounter::testing {

struct FanOut {
  RedisCluster& cluster = shared_cluster();
  ClusterFaultProxy proxies{cluster};
  std::string prefix = unique_prefix() + "fan:";
  Redis through;
  Redis direct{cluster.options()};
  LimitCounter limits{through, Calendar("UTC"), counter_options()};
  LimitCounter reader{direct, Calendar("UTC"), counter_options()};

  // `retry`: the library's resends of a lost reply; none by default, so that a lost reply
  // reaches the caller and the host's retry with the same id is what is tested.
  explicit FanOut(RetryOptions retry = no_resends(),
                  std::chrono::milliseconds command_timeout = std::chrono::milliseconds(300))
      : through([&] {
          RedisOptions options = proxies.options();
          options.command_timeout = command_timeout;
          options.breaker_failures = 0;
          options.retry = retry;
          return options;
        }()) {
    REQUIRE(detail::key_slot("{dept}") != detail::key_slot("{merchant}"));
    // a first EVALSHA answered NOSCRIPT did not run: lose the reply of a script that runs
    cluster.load_scripts();
  }

  static RetryOptions no_resends() {
    RetryOptions retry;
    retry.max_attempts = 1;
    return retry;
  }
  LimitCounterOptions counter_options() const {
    LimitCounterOptions options;
    options.key_prefix = prefix;
    return options;
  }

  // A day limit on each of two shapes whose counters live in different slots: two shares.
  void two_daily_limits() {
    const RuleSet rules =
        RuleSet()
            .add(Rule("dept-day").where("dept").per(Period::day).max_amount(100'000))
            .add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(100'000));
    limits.set_rules(rules);
    reader.set_rules(rules);
  }

  // A LimitCounter whose reservations hold `timeout` (their shares 100 ms longer), under a day
  // limit of 150 on each of two shapes whose counters live in different slots.
  std::unique_ptr<LimitCounter> limits_holding_for(std::chrono::milliseconds timeout) {
    LimitCounterOptions options = counter_options();
    options.reservation_timeout = timeout;
    options.cluster_hold_grace = std::chrono::milliseconds(100);
    auto held = std::make_unique<LimitCounter>(through, Calendar("UTC"), options);
    held->set_rules(
        RuleSet()
            .add(Rule("dept-day").where("dept").per(Period::day).max_amount(150))
            .add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(150)));
    return held;
  }

  Transaction tx(const std::string& id, std::int64_t amount = 100) const {
    return Transaction{id, {{"merchant", "m1"}, {"dept", "cmb"}}, amount};
  }
  Usage dept() { return reader.usage("dept", Dimension{"cmb"}, Period::day); }
  Usage merchant() { return reader.usage("merchant", Dimension{"m1"}, Period::day); }

  // The key whose script call a step sends: the home record, or the share of a shape.
  std::string home(const std::string& id) const { return prefix + "tx:{" + id + "}"; }
  std::string share(const std::string& shape, const std::string& id) const {
    return prefix + "{" + shape + "}:tx:" + id;
  }
  FaultProxy& proxy_of(const std::string& key) {
    return proxies.proxy_of(cluster.owner_of(detail::key_slot(key)));
  }

  // Loses the reply of the `nth` (1-based) script call on `key` from now on, on the node that
  // serves it (`fault`: drop_reply or cut_mid_reply, both after the call ran).
  FaultProxy& lose_reply(const std::string& key, int nth = 1, Fault fault = Fault::drop_reply) {
    FaultProxy& proxy = proxy_of(key);
    if (nth > 1) {
      proxy.add_rule({script_call_with_key_prefix(key), Fault::forward, nth - 1});
    }
    proxy.add_rule({script_call_with_key_prefix(key), fault});
    return proxy;
  }
};

} // namespace limitcounter::testing
