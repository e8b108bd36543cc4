// A rule store write whose reply never came back (lost, or the connection cut mid-reply) after
// the script ran: a host that sends the same put again with its expected version must find
// one new version, not two, and be told the version its first attempt stored.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include <limitcounter/limitcounter.hpp>
#include <limitcounter/rule_store.hpp>

#include "support/fault_proxy.hpp"
#include "support/probe.hpp"
#include "support/proxied_server.hpp"

using namespace std::chrono_literals;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::Outcome;
using limitcounter::Period;
using limitcounter::Redis;
using limitcounter::Rule;
using limitcounter::RuleChange;
using limitcounter::RuleSet;
using limitcounter::RuleStore;
using limitcounter::RuleStoreOptions;
using limitcounter::testing::command_calls;
using limitcounter::testing::error_of;
using limitcounter::testing::Fault;
using limitcounter::testing::FaultRule;
using limitcounter::testing::ProxiedServer;
using limitcounter::testing::script_call_with_key_prefix;
using limitcounter::testing::script_calls;

namespace {

RuleSet day_limit(std::int64_t max_count) {
  return RuleSet().add(
      Rule("merchant-day").where("merchant").per(Period::day).max_count(max_count));
}

struct StoreThroughProxy : ProxiedServer {
  Redis through{through_proxy(300ms)};
  RuleStore store{through, "router", RuleStoreOptions{prefix, 1000}};
  RuleStore reader{direct, "router", RuleStoreOptions{prefix, 1000}};

  /// Runs `put` with `fault` on its script call: it throws Outcome::unknown, and the server
  /// ran the script once.
  template <typename Put> void run_with_fault(Fault fault, Put&& put) {
    FaultRule rule;
    rule.matches = script_call_with_key_prefix(prefix);
    rule.fault = fault;
    proxy.add_rule(rule);
    const long long before = script_calls(direct);
    const Error error = error_of(put);
    CHECK(error.outcome() == Outcome::unknown);
    CHECK(proxy.injected(fault) == 1);
    CHECK(script_calls(direct) - before == 1); // it ran
  }
  long long history_length() { return direct.command({"XLEN", store.history_key()}).as_integer(); }
};

const RuleChange alice{"alice", "first limits"};

} // namespace

TEST_CASE_METHOD(StoreThroughProxy,
                 "rule store: a put with its expected version retried after a lost reply "
                 "stores one version and returns it",
                 "[fault][lost_reply][rule_store]") {
  for (const Fault fault : {Fault::drop_reply, Fault::cut_mid_reply}) {
    INFO(limitcounter::testing::to_string(fault));
    const std::uint64_t expected = reader.current_version();
    const RuleSet rules = day_limit(static_cast<std::int64_t>(expected) + 10);
    run_with_fault(fault, [&] { store.put(rules, alice, expected); });
    CHECK(reader.current_version() == expected + 1); // stored by the first attempt
    CHECK(history_length() == static_cast<long long>(expected + 1));

    const long long before = script_calls(direct);
    CHECK(store.put(rules, alice, expected) == expected + 1); // the first attempt's answer
    CHECK(script_calls(direct) - before == 1);                // its script wrote nothing:
    CHECK(reader.current_version() == expected + 1);
    CHECK(history_length() == static_cast<long long>(expected + 1));
    CHECK_FALSE(reader.get(expected + 2));
  }
}

TEST_CASE_METHOD(StoreThroughProxy,
                 "rule store: a put retried after a lost reply and another writer's version "
                 "returns its own version; other content is a conflict",
                 "[fault][lost_reply][rule_store]") {
  run_with_fault(Fault::drop_reply, [&] { store.put(day_limit(10), alice, 0); });
  REQUIRE(reader.put(day_limit(20), {"bob", "more"}) == 2); // another writer, meanwhile

  CHECK(store.put(day_limit(10), alice, 0) == 1);
  CHECK(reader.current_version() == 2);
  CHECK(history_length() == 2);
  CHECK(RuleStore::parse(*reader.get(1)).rules().at(0).max_count() == 10);

  // Not a retry: other rules, or the same rules with another reason, expecting 0.
  for (const auto& [rules, change] : {std::pair<RuleSet, RuleChange>{day_limit(30), alice},
                                      {day_limit(10), {"alice", "again"}}}) {
    const Error conflict = error_of([&] { store.put(rules, change, 0); });
    CHECK(conflict.code() == errc::conflict);
    CHECK(conflict.outcome() == Outcome::failed);
    CHECK_THAT(conflict.what(),
               Catch::Contains("expected version 0") && Catch::Contains("current version is 2"));
  }
  CHECK(history_length() == 2);
}
