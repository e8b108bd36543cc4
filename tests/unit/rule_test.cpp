#include <catch2/catch.hpp>

#include <limitcounter/error.hpp>
#include <limitcounter/rule.hpp>

#include "limit_counter/rule_matching.hpp"

using limitcounter::errc;
using limitcounter::Error;
using limitcounter::Period;
using limitcounter::Rule;
using limitcounter::RuleSet;
using limitcounter::Transaction;
using limitcounter::detail::match_rules;
using limitcounter::detail::validate_transaction;

namespace {

void require_refused(RuleSet& rules, Rule rule, const std::string& needle) {
  try {
    rules.add(std::move(rule));
    FAIL("rule accepted; expected: " << needle);
  } catch (const Error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK_THAT(e.what(), Catch::Contains(needle));
  }
}

std::vector<std::string> names(const std::vector<const Rule*>& rules) {
  std::vector<std::string> out;
  for (const Rule* rule : rules) {
    out.push_back(rule->name());
  }
  return out;
}

Transaction payment(std::string merchant, std::string dept, std::int64_t amount = 100) {
  Transaction tx;
  tx.id = "tx-1";
  tx.attributes = {{"merchant", std::move(merchant)},
                   {"channel", "Ali"},
                   {"transType", "Deduct"},
                   {"dept", std::move(dept)}};
  tx.amount = amount;
  return tx;
}

} // namespace

TEST_CASE("rules are validated when added", "[rules]") {
  RuleSet rules;
  rules.add(Rule("ok").where("merchant").per(Period::day).max_count(10));
  require_refused(rules, Rule("ok").where("dept").per(Period::day).max_count(1), "added twice");
  require_refused(rules, Rule("bad name").where("dept").per(Period::day).max_count(1), "rule name");
  require_refused(rules, Rule("none").per(Period::day).max_count(1), "no condition");
  require_refused(rules, Rule("u").where("colour").per(Period::day).max_count(1),
                  "unknown attribute \"colour\"");
  require_refused(rules, Rule("t").where("dept").where("dept").per(Period::day).max_count(1),
                  "twice");
  require_refused(rules, Rule("v").where("dept", "c b").per(Period::day).max_count(1),
                  "whitespace");
  require_refused(rules, Rule("p").where("dept").max_count(1), "no period");
  require_refused(rules, Rule("l").where("dept").per(Period::day),
                  "no max_count and no max_amount");
  require_refused(rules, Rule("z").where("dept").per(Period::day).max_count(0), "must be positive");
  require_refused(rules, Rule("n").where("dept").per(Period::day).max_amount(-5), "-5");
  require_refused(
      rules, Rule("big").where("dept").per(Period::day).max_amount(std::int64_t{1} << 53), "2^53");
  require_refused(rules, Rule("s").where("dept").per_transaction().max_count(3), "not a count");
  require_refused(rules, Rule("d").where("merchant").per(Period::day).max_amount(5),
                  "duplicates rule \"ok\"");
  // a blocking rule may have a zero limit
  rules.add(Rule("blocked").where("merchant", "m-bad").per(Period::day).max_count(0).blocking());
  // the same conditions in another period are another rule
  rules.add(Rule("ok-month").where("merchant").per(Period::month).max_count(100));
  CHECK(rules.rules().size() == 3);
}

TEST_CASE("an exact rule overrides the wildcard rule of its shape for its value only", "[rules]") {
  RuleSet rules;
  rules.add(Rule("bank-any").where("dept").per(Period::day).max_count(500));
  rules.add(Rule("bank-cmb").where("dept", "cmb").per(Period::day).max_count(1000));
  rules.add(Rule("bank-any-month").where("dept").per(Period::month).max_count(9000));
  rules.add(Rule("merchant").where("merchant").per(Period::day).max_amount(100000));
  rules.add(Rule("single").where("merchant").per_transaction().max_amount(500));
  rules.add(Rule("channel-bank")
                .where("channel", "Ali")
                .where("transType")
                .where("dept", "cib")
                .per(Period::day)
                .max_count(7));

  auto cmb = match_rules(rules, payment("m1", "cmb"));
  CHECK(names(cmb.window) == std::vector<std::string>{"bank-cmb", "bank-any-month", "merchant"});
  CHECK(names(cmb.per_transaction) == std::vector<std::string>{"single"});

  auto cib = match_rules(rules, payment("m1", "cib"));
  CHECK(names(cib.window) ==
        std::vector<std::string>{"bank-any", "bank-any-month", "merchant", "channel-bank"});
}

TEST_CASE("rule counters are named by shape", "[rules]") {
  CHECK(Rule("x").where("channel").where("transType").where("dept", "cmb").counter_name() ==
        "channel+transType+dept");
  CHECK(Rule("x").where("channel").where("dept", "cmb").specificity() == 1);
}

TEST_CASE("transactions are validated against the rule set", "[rules]") {
  RuleSet rules;
  rules.add(Rule("bank").where("dept").per(Period::day).max_count(5));
  const auto refused = [&](Transaction tx, const std::string& needle) {
    try {
      validate_transaction(rules, tx);
      FAIL("accepted; expected: " << needle);
    } catch (const Error& e) {
      CHECK(e.code() == errc::invalid_argument);
      CHECK_THAT(e.what(), Catch::Contains(needle));
    }
  };
  Transaction tx = payment("m1", "cmb");
  validate_transaction(rules, tx);
  tx.attributes.erase("dept");
  refused(tx, "lacks attribute \"dept\" that rule \"bank\" needs");
  refused(payment("m1", "*"), "wildcard");
  refused(payment("m 1", "cmb"), "whitespace");
  tx = payment("m1", "cmb");
  tx.attributes["colour"] = "red";
  refused(tx, "unknown attribute \"colour\"");
  tx = payment("m1", "cmb");
  tx.id = "";
  refused(tx, "transaction id");
  tx.id = "a{b}";
  refused(tx, "brace");
  tx.id = "order:2021:1"; // colons are fine in ids
  validate_transaction(rules, tx);
}
