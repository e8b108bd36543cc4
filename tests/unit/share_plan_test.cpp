// Which shares a cluster transaction has (src/limit_counter/share_plan.cpp): the refund that
// brings an original past the replay horizon must find the same shares a decision would.
#include <catch2/catch.hpp>

#include "limit_counter/share_plan.hpp"
#include "redis/key_slot.hpp"

using limitcounter::CounterKeys;
using limitcounter::Period;
using limitcounter::Rule;
using limitcounter::Transaction;
using limitcounter::detail::key_slot;
using limitcounter::detail::share_plans;

TEST_CASE("a transaction's shares group its rules by the slot of their counters", "[cluster]") {
  const Rule merchant_day = Rule("merchant-day").where("merchant").per(Period::day).max_count(9);
  const Rule user_day = Rule("user-day").where("user").per(Period::day).max_count(9);
  const Rule merchant_month =
      Rule("merchant-month").where("merchant").per(Period::month).max_count(9);
  const Transaction paid{"pay-1", {{"merchant", "m1"}, {"user", "u1"}}, 100, {}};

  SECTION("one bucket: a counter's every window is in its shape's slot") {
    const CounterKeys keys("p:");
    const auto plans = share_plans(keys, paid, {&merchant_day, &user_day, &merchant_month});
    const std::string merchant = keys.tag(merchant_day.counter_name(), "m1");
    const std::string user = keys.tag(user_day.counter_name(), "u1");
    REQUIRE(key_slot(keys.window(merchant, Period::day, "20260101")) !=
            key_slot(keys.window(user, Period::day, "20260101")));
    REQUIRE(plans.size() == 2);
    CHECK(plans[0].tag == merchant); // in the order of each slot's first rule
    CHECK(plans[0].rules == std::vector<const Rule*>{&merchant_day, &merchant_month});
    CHECK(plans[1].tag == user);
    CHECK(plans[1].rules == std::vector<const Rule*>{&user_day});
    CHECK(plans[1].slot == key_slot(keys.window(user, Period::day, "20260101")));
  }
  SECTION("buckets: the dimension value picks the slot, the same for every call") {
    const CounterKeys keys("p:", 64);
    const auto first = share_plans(keys, paid, {&merchant_day, &merchant_month});
    REQUIRE(first.size() == 1);
    CHECK(first[0].tag == keys.tag(merchant_day.counter_name(), "m1"));
    const auto again = share_plans(keys, paid, {&merchant_day, &merchant_month});
    CHECK(again[0].slot == first[0].slot);
    CHECK(again[0].tag == first[0].tag);
  }
  CHECK(share_plans(CounterKeys("p:"), paid, {}).empty());
}
