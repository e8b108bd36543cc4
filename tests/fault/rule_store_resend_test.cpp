// A rule store put with an expected version whose reply was lost: the library resends it, and
// the put finds its first send stored (needs limitcounter::rules_file).
#include <catch2/catch.hpp>

#include <limitcounter/rule_store.hpp>

#include "fault/resend_fixture.hpp"

using limitcounter::Period;
using limitcounter::Rule;
using limitcounter::RuleSet;
using limitcounter::testing::Fault;
using limitcounter::testing::ResendFixture;

TEST_CASE_METHOD(ResendFixture,
                 "rule store: a put with a version whose reply was lost is resent and returns "
                 "the version it stored, once",
                 "[fault][resend][rule_store]") {
  fault = GENERATE(Fault::drop_reply, Fault::cut_mid_reply);
  limitcounter::RuleStoreOptions options;
  options.key_prefix = prefix;
  limitcounter::RuleStore store(through, "shared", options);
  const RuleSet rules =
      RuleSet().add(Rule("day").where("merchant").per(Period::day).max_amount(1000));
  CHECK(absorbed([&] { return store.put(rules, {"ops", "first"}, 0); }) == 1);
  CHECK(store.current_version() == 1);
  CHECK(direct.command({"XLEN", store.history_key()}).as_integer() == 1);
}
