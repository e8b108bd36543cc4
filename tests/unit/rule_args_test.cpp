#include <catch2/catch.hpp>

#include "limit_counter/codec/decide_arguments.hpp"
#include "limit_counter/codec/rule_args.hpp"

using namespace std::chrono_literals;
using limitcounter::Calendar;
using limitcounter::CounterKeys;
using limitcounter::Period;
using limitcounter::Rule;
using limitcounter::RuleSet;
using limitcounter::TimePoint;
using limitcounter::Transaction;
using namespace limitcounter::detail;

namespace {

RuleSet rule_set() {
  RuleSet rules({"dept", "merchant", "user"});
  rules.add(Rule("single").where("merchant").per_transaction().max_amount(1000));
  rules.add(Rule("dept-day").where("dept").per(Period::day).max_count(10));
  rules.add(Rule("cmb-day").where("dept", "cmb").per(Period::day).max_amount(500));
  rules.add(Rule("merchant-month").where("merchant").per(Period::month).max_amount(900));
  rules.add(Rule("pair-hour").where("dept").where("user").per(Period::hour).max_count(3));
  return rules;
}

// build_decide for `transaction` at `at`, with the rule set's args or building its own.
LimitCall decide(const RuleSet& rules, const CounterKeys& keys, const RuleSetArgs* args,
                 TimePoint at) {
  const Calendar calendar("Asia/Shanghai");
  DecideContext context;
  context.calendar = &calendar;
  context.keys = &keys;
  context.rule_args = args;
  context.window_grace = 1h;
  context.replay_horizon = 24h;
  context.reservation_timeout = 15min;
  context.now = at;
  Transaction transaction;
  transaction.id = "t1";
  transaction.attributes = {{"dept", "cmb"}, {"merchant", "m1"}, {"user", "u7"}};
  transaction.amount = 42;
  transaction.time = at;
  std::vector<const Rule*> per_transaction{&rules.rules()[0]};
  std::vector<const Rule*> window;
  for (std::size_t i = 1; i < rules.rules().size(); ++i) {
    window.push_back(&rules.rules()[i]);
  }
  return build_decide(limitcounter::LimitOp::consume, transaction, per_transaction, window,
                      context);
}

} // namespace

TEST_CASE("a decide call built from a rule set's args is the one built without them",
          "[limit-codec]") {
  const RuleSet rules = rule_set();
  const std::uint32_t buckets = GENERATE(1u, 4u);
  const CounterKeys keys("p:", buckets);
  const RuleSetArgs args(rules, keys);
  // two days and two months apart: each period's key expiry changes with its window
  for (const TimePoint at : {TimePoint{1636648200s}, TimePoint{1636648200s + 24h * 40}}) {
    const LimitCall built = decide(rules, keys, nullptr, at);
    const LimitCall cached = decide(rules, keys, &args, at);
    CHECK(cached.keys == built.keys);
    CHECK(cached.args == built.args);
    REQUIRE(cached.shape.counters.size() == built.shape.counters.size());
    for (std::size_t i = 0; i < built.shape.counters.size(); ++i) {
      CHECK(cached.shape.counters[i].window_id == built.shape.counters[i].window_id);
    }
  }
}

TEST_CASE("a rule set's args answer only for its own rules", "[limit-codec]") {
  const RuleSet rules = rule_set();
  const RuleSet other = rule_set();
  const CounterKeys keys("p:");
  const RuleSetArgs args(rules, keys);
  const RuleArgs* found = args.find(&rules.rules()[4]);
  REQUIRE(found != nullptr);
  CHECK(found->counter_name == "dept+user");
  CHECK(found->window_key_head == "p:{dept+user}:");
  CHECK(args.find(&other.rules()[4]) == nullptr);
  // a call whose rules are not of the set builds their args itself
  const LimitCall mixed = decide(other, keys, &args, TimePoint{1636648200s});
  CHECK(mixed.args == decide(other, keys, nullptr, TimePoint{1636648200s}).args);
}
