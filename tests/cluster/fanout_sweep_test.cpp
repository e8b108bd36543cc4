// LimitCounter::finish_interrupted: fan-outs whose client connection was cut half way (by the
// fault proxy) and that the host never retried are finished by the sweep: a consume begun and
// never finished is abandoned (its shares give back what they took), a denial's void, a confirm,
// a cancel and a refund reach every share; the counters agree with the home records, and a
// second sweep does nothing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/limitcounter.hpp>

#include "redis/key_slot.hpp"
#include "support/fault_proxy.hpp"
#include "support/probe.hpp"
#include "support/redis_cluster.hpp"

using namespace std::chrono_literals;
using namespace limitcounter;
using namespace limitcounter::testing;

namespace {

struct Sweep {
  RedisCluster& cluster = shared_cluster();
  ClusterFaultProxy proxies{cluster};
  std::string prefix = unique_prefix() + "sw:";
  Redis through{[this] {
    RedisOptions options = proxies.options();
    options.command_timeout = 300ms;
    options.breaker_failures = 0;
    options.retry.max_attempts = 1; // an interrupted fan-out stays so, for the sweep
    return options;
  }()};
  Redis direct{cluster.options()};
  LimitCounter limits{through, Calendar("UTC"), counter_options()};
  LimitCounter sweeper{direct, Calendar("UTC"), counter_options()};

  Sweep() {
    REQUIRE(detail::key_slot("{dept}") != detail::key_slot("{merchant}"));
    const RuleSet rules =
        RuleSet()
            .add(Rule("dept-day").where("dept").per(Period::day).max_amount(1'000'000))
            .add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(150));
    limits.set_rules(rules);
    sweeper.set_rules(rules);
    // a first script call answered NOSCRIPT (or "Function not found") did not run: cut the call
    // that runs
    cluster.load_scripts();
  }

  LimitCounterOptions counter_options() const {
    LimitCounterOptions options;
    options.key_prefix = prefix;
    return options;
  }
  static Transaction tx(const std::string& id, std::int64_t amount = 100) {
    return Transaction{id, {{"merchant", "m-" + id}, {"dept", "d-" + id}}, amount};
  }
  Usage usage_of(const std::string& shape, const std::string& id) {
    return sweeper.usage(shape, Dimension{shape.substr(0, 1) + "-" + id}, Period::day);
  }
  std::string home(const std::string& id) const { return prefix + "tx:{" + id + "}"; }
  std::string share(const std::string& shape, const std::string& id) const {
    return prefix + "{" + shape + "}:tx:" + id;
  }
  std::string field(const std::string& key, const std::string& name) {
    return testing::record_field(direct, key, name);
  }

  // Cuts the client's connection instead of sending the `nth` script call on `key`: that call
  // does not run, and neither does anything the call would have sent after it.
  void cut_at(const std::string& key, int nth) {
    FaultProxy& proxy = proxies.proxy_of(cluster.owner_of(detail::key_slot(key)));
    if (nth > 1) {
      proxy.add_rule({script_call_with_key_prefix(key), Fault::forward, nth - 1});
    }
    proxy.add_rule({script_call_with_key_prefix(key), Fault::close_before_forward});
  }
  template <typename Call> void interrupted(Call&& call) {
    CHECK(error_of(call).outcome() == Outcome::unknown);
  }
};

} // namespace

TEST_CASE_METHOD(Sweep, "the sweep finishes fan-outs nobody retried; a second sweep does nothing",
                 "[cluster][proxy][home][sweep]") {
  // a consume whose home record never heard its shares: begun, both shares counted
  cut_at(home("abandoned"), 2);
  interrupted([&] { limits.consume(tx("abandoned")); });
  CHECK(field(home("abandoned"), "state") == "pending");
  CHECK(usage_of("dept", "abandoned") == Usage{1, 100});

  // a denial (merchant over its limit) whose void of the dept share was never sent
  cut_at(share("dept", "denied"), 2);
  interrupted([&] { limits.consume(tx("denied", 200)); });
  CHECK(field(home("denied"), "state") == "denied");
  CHECK(usage_of("dept", "denied") == Usage{1, 200});

  // a confirm that the merchant share never followed
  REQUIRE(limits.reserve(tx("confirmed")).allowed());
  cut_at(share("merchant", "confirmed"), 1);
  interrupted([&] { limits.confirm("confirmed", 60); });
  CHECK(field(share("merchant", "confirmed"), "state") == "reserved");

  // a cancel that the dept share never followed
  REQUIRE(limits.reserve(tx("cancelled")).allowed());
  cut_at(share("dept", "cancelled"), 1);
  interrupted([&] { limits.cancel("cancelled"); });
  CHECK(field(share("dept", "cancelled"), "state") == "reserved");

  // a refund that the merchant share never followed (its catch-up confirm ran, the refund not)
  REQUIRE(limits.consume(tx("refunded")).allowed());
  cut_at(share("merchant", "refunded"), 2);
  interrupted([&] { limits.refund("refunded", 40, "r1"); });
  CHECK(field(share("merchant", "refunded"), "refunded") == "0");

  // a confirm whose fan-out finished: nothing to do
  REQUIRE(limits.reserve(tx("clean")).allowed());
  REQUIRE(limits.confirm("clean", 70).amount == 70);

  // nothing is an hour old
  CHECK(sweeper.finish_interrupted(1h).empty());
  CHECK(field(home("abandoned"), "state") == "pending");

  std::map<std::string, InterruptedFanOut> swept;
  for (InterruptedFanOut& done : sweeper.finish_interrupted(0s)) {
    swept[done.transaction_id] = std::move(done);
  }
  REQUIRE(swept.size() == 5);
  const std::map<std::string, TransactionState> states{{"abandoned", TransactionState::voided},
                                                       {"denied", TransactionState::denied},
                                                       {"confirmed", TransactionState::confirmed},
                                                       {"cancelled", TransactionState::cancelled},
                                                       {"refunded", TransactionState::consumed}};
  for (const auto& [id, state] : states) {
    INFO(id);
    REQUIRE(swept.count(id) == 1);
    CHECK(swept[id].state == state);
    CHECK(swept[id].abandoned == (id == "abandoned"));
    CHECK(swept[id].shares_changed >= 1);
    CHECK(field(home(id), "state") == to_string(state));
  }
  // the counters follow the home records exactly
  const std::map<std::string, Usage> expected{{"abandoned", {0, 0}},  {"denied", {0, 0}},
                                              {"confirmed", {1, 60}}, {"cancelled", {0, 0}},
                                              {"refunded", {1, 60}},  {"clean", {1, 70}}};
  for (const auto& [id, usage] : expected) {
    INFO(id);
    CHECK(usage_of("dept", id) == usage);
    CHECK(usage_of("merchant", id) == usage);
  }
  for (const std::string shape : {"dept", "merchant"}) {
    CHECK(field(share(shape, "abandoned"), "state") == "voided");
    CHECK(field(share(shape, "confirmed"), "state") == "confirmed");
    CHECK(field(share(shape, "cancelled"), "state") == "cancelled");
    CHECK(field(share(shape, "refunded"), "refunded") == "40");
  }

  CHECK(sweeper.finish_interrupted(0s).empty());

  // the host that retries the abandoned id learns that it did not happen
  const Decision late = limits.consume(tx("abandoned"));
  CHECK(late.verdict == Decision::Verdict::cancelled);
  CHECK(late.replayed);
  CHECK(late.state == TransactionState::voided);
  CHECK(usage_of("dept", "abandoned") == Usage{0, 0});
  const CancelResult cancelled = limits.cancel("abandoned");
  CHECK(cancelled.status == CancelResult::Status::cancelled);
  CHECK(cancelled.replayed);
}

TEST_CASE_METHOD(Sweep, "the sweep refuses a negative or huge age and a max of 0",
                 "[cluster][home][sweep]") {
  CHECK_THROWS_WITH(sweeper.finish_interrupted(-1s), Catch::Contains("-1s"));
  CHECK_THROWS_WITH(sweeper.finish_interrupted(std::chrono::seconds(9'007'199'254'741)),
                    Catch::Contains("9007199254741s"));
  CHECK_THROWS_WITH(sweeper.finish_interrupted(0s, 0), Catch::Contains("max 0"));
}
