// Rules as data: the YAML format of docs/RULES.md (limitcounter::rules_file).
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include <limitcounter/error.hpp>
#include <limitcounter/rules_file.hpp>

using limitcounter::errc;
using limitcounter::Error;
using limitcounter::FailurePolicy;
using limitcounter::Period;
using limitcounter::Rule;
using limitcounter::rules_from_file;
using limitcounter::rules_from_yaml;
using limitcounter::RuleSet;
using limitcounter::to_yaml;

namespace {

// The example of docs/RULES.md, kept in step with it by hand.
const char* const example = R"(# Limits of the payment router. Amounts are minor units (cents).
format: 1
rules:
  - name: single                # one payment at most 500.00
    where: [merchant]
    per: transaction
    max_amount: 500_00
  - name: merchant-day
    where:
      - merchant
    per: day
    max_amount: 10_000_00
    on_redis_failure: local     # while Redis is down, this node may allow 10 % per window
    local_share: 0.1
  - name: bank-day
    where: [dept]
    per: day
    max_count: 500
    on_redis_failure: deny
  - name: cmb-day               # overrides bank-day for cmb only
    where:
      - dept: cmb
    per: day
    max_count: 1000
  - name: channel-month
    where: [channel, transType, {dept: "*"}]
    per: month
    max_count: 100000
    max_amount: 5_000_000_00
    on_redis_failure: allow
  - name: blocked-merchant      # denies every payment of m-666
    where:
      - merchant: m-666
    per: day
    max_count: 0
    blocking: true
)";

bool same_rule(const Rule& a, const Rule& b) {
  if (a.conditions().size() != b.conditions().size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.conditions().size(); ++i) {
    if (a.conditions()[i].attribute != b.conditions()[i].attribute ||
        a.conditions()[i].value != b.conditions()[i].value) {
      return false;
    }
  }
  return a.name() == b.name() && a.kind() == b.kind() && a.period() == b.period() &&
         a.max_count() == b.max_count() && a.max_amount() == b.max_amount() &&
         a.is_blocking() == b.is_blocking() && a.failure_policy() == b.failure_policy() &&
         a.local_share() == b.local_share();
}

void check_same(const RuleSet& a, const RuleSet& b) {
  CHECK(a.attributes() == b.attributes());
  REQUIRE(a.rules().size() == b.rules().size());
  for (std::size_t i = 0; i < a.rules().size(); ++i) {
    INFO("rule " << a.rules()[i].name());
    CHECK(same_rule(a.rules()[i], b.rules()[i]));
  }
}

// The message of the Error that reading `text` as "rules.yaml" throws.
std::string error_of(const std::string& text) {
  try {
    rules_from_yaml(text, "rules.yaml");
  } catch (const Error& error) {
    CHECK(error.code() == errc::invalid_argument);
    return error.what();
  }
  FAIL("no error for:\n" << text);
  return {};
}

} // namespace

TEST_CASE("the documented example reads as the rule set built in code", "[rules_file]") {
  const RuleSet read = rules_from_yaml(example);
  RuleSet built;
  built.add(Rule("single").where("merchant").per_transaction().max_amount(500'00))
      .add(Rule("merchant-day")
               .where("merchant")
               .per(Period::day)
               .max_amount(10'000'00)
               .on_redis_failure(FailurePolicy::local, 0.1))
      .add(Rule("bank-day")
               .where("dept")
               .per(Period::day)
               .max_count(500)
               .on_redis_failure(FailurePolicy::deny))
      .add(Rule("cmb-day").where("dept", "cmb").per(Period::day).max_count(1000))
      .add(Rule("channel-month")
               .where("channel")
               .where("transType")
               .where("dept")
               .per(Period::month)
               .max_count(100000)
               .max_amount(5'000'000'00)
               .on_redis_failure(FailurePolicy::allow))
      .add(Rule("blocked-merchant")
               .where("merchant", "m-666")
               .per(Period::day)
               .max_count(0)
               .blocking());
  check_same(read, built);
  CHECK(read.rules()[4].counter_name() == "channel+transType+dept");
}

TEST_CASE("to_yaml and rules_from_yaml round trip", "[rules_file]") {
  const RuleSet original = rules_from_yaml(example);
  const std::string text = to_yaml(original);
  INFO(text);
  check_same(rules_from_yaml(text), original);
  CHECK(to_yaml(rules_from_yaml(text)) == text);
  CHECK(text.find("local_share: 0.1\n") != std::string::npos); // shortest, not 0.10000000000000001

  // Values that YAML would read as null, booleans or numbers stay strings; own attributes stay.
  RuleSet odd({"merchant", "null", "region"});
  odd.add(Rule("odd")
              .where("merchant", "null")
              .where("null", "true")
              .where("region", "007")
              .per(Period::week)
              .max_count(1)
              .on_redis_failure(FailurePolicy::local, 1.0 / 3.0));
  odd.add(Rule("empty-rule-set-is-fine").where("region").per(Period::minute).max_amount(1));
  const std::string odd_text = to_yaml(odd);
  INFO(odd_text);
  check_same(rules_from_yaml(odd_text), odd);

  CHECK(rules_from_yaml("rules: []").rules().empty());
}

TEST_CASE("rules_from_file names the file in errors and reads the rules", "[rules_file]") {
  const std::string path = "rules_file_test_" + std::to_string(::getpid()) + ".yaml";
  {
    std::ofstream out(path);
    out << "rules:\n  - name: a\n    where: [merchant]\n    per: day\n    max_count: 5\n"
           "  - name: b\n    where: [merchant]\n    per: day\n    max_amount: -5\n";
  }
  try {
    rules_from_file(path);
    FAIL("no error");
  } catch (const Error& error) {
    CHECK(std::string(error.what()) == path + ":9: rule \"b\": max_amount -5 must not be negative");
  }
  {
    std::ofstream out(path);
    out << "rules:\n  - name: a\n    where: [merchant]\n    per: day\n    max_count: 5\n";
  }
  CHECK(rules_from_file(path).rules().size() == 1);
  std::remove(path.c_str());
  CHECK_THROWS_WITH(rules_from_file(path),
                    Catch::Contains(path) && Catch::Contains("cannot be read"));
}

TEST_CASE("every error names the file, the line, the rule and the problem", "[rules_file]") {
  // lines 1-3; the keys of each case start on line 4
  const std::string head = "rules:\n  - name: merchant-day\n    where: [merchant]\n";
  const std::vector<std::pair<std::string, std::string>> cases{
      {head + "    per: day\n    max_ammount: 100\n",
       "rules.yaml:5: rule \"merchant-day\": unknown key \"max_ammount\" (known: name, where, "
       "per, max_count, max_amount, blocking, on_redis_failure, local_share)"},
      {head + "    per: day\n    max_amount: 100\n    max_amount: 200\n",
       "rules.yaml:6: rule \"merchant-day\": key \"max_amount\" is given twice"},
      {head + "    per: fortnight\n    max_count: 1\n",
       "rules.yaml:4: rule \"merchant-day\": per \"fortnight\" is not minute, hour, day, week, "
       "month, year or transaction"},
      {head + "    per: day\n    max_count: 1e3\n",
       "rules.yaml:5: rule \"merchant-day\": max_count \"1e3\" is not an integer (minor units, "
       "e.g. 100000 or 1000_00)"},
      {head + "    per: day\n    max_amount: 99999999999999999999\n",
       "rules.yaml:5: rule \"merchant-day\": max_amount \"99999999999999999999\" is too large"},
      {head + "    per: day\n    max_amount: 9007199254740992\n",
       "rules.yaml:2: rule \"merchant-day\": max_amount 9007199254740992 is 2^53 or more"},
      {head + "    per: day\n    max_count: 0\n",
       "rules.yaml:2: rule \"merchant-day\": max_count 0 must be positive (use blocking() to "
       "block)"},
      {head + "    per: day\n    max_count: 5\n    blocking: yes\n",
       "rules.yaml:6: rule \"merchant-day\": blocking \"yes\" must be true or false"},
      {head + "    per: day\n    max_count: 5\n    on_redis_failure: open\n",
       "rules.yaml:6: rule \"merchant-day\": on_redis_failure \"open\" is not raise, allow, "
       "deny or local"},
      {head + "    per: day\n    max_count: 5\n    on_redis_failure: local\n",
       "rules.yaml:6: rule \"merchant-day\": on_redis_failure: local needs a local_share (0 < "
       "share <= 1)"},
      {head + "    per: day\n    max_count: 5\n    on_redis_failure: local\n    local_share: 1.5\n",
       "rules.yaml:2: rule \"merchant-day\": local share 1.500000 must be above 0 and at most 1"},
      {head + "    per: day\n    max_count:\n",
       "rules.yaml:5: rule \"merchant-day\": max_count has no value"},
      {"rules:\n  - name: x\n    where: [merchant, {dept: cmb, user: u}]\n    per: day\n",
       "rules.yaml:3: rule \"x\": a condition names one attribute (`- dept: cmb`), this one names "
       "2"},
      {"rules:\n  - name: x\n    where: [shop]\n    per: day\n    max_count: 1\n",
       "rules.yaml:2: rule \"x\" names unknown attribute \"shop\""},
      {"rules:\n  - where: [merchant]\n    per: day\n", "rules.yaml:2: rule #1: has no \"name\""},
      {"rules:\n  - name: a\n    where: [merchant]\n    per: day\n    max_count: 1\n"
       "  - name: a\n    where: [dept]\n    per: day\n    max_count: 1\n",
       "rules.yaml:6: rule \"a\" is added twice"},
      {"rule:\n  - name: a\n",
       "rules.yaml:1: unknown key \"rule\" (known: format, attributes, rules)"},
      {"format: 1\n",
       "rules.yaml:1: no \"rules\" key (write `rules: []` for a set that allows everything)"},
      {"format: 2\nrules: []\n",
       "rules.yaml:1: format 2 is not supported (this library reads format 1)"},
      {"rules: []\n---\nrules: []\n",
       "rules.yaml:3: more than one YAML document (`---`): put every rule in one"},
      {"", "rules.yaml: no YAML document (write `rules: []` for an empty set)"},
  };
  for (const auto& [text, message] : cases) {
    INFO(text);
    CHECK(error_of(text) == message);
  }
  // Malformed YAML: yaml-cpp's message at its line (an unquoted * starts an alias).
  CHECK_THAT(
      error_of(head + "    per: day\n    max_count: 1\n  - name: y\n    where: [{dept: *}]\n"),
      Catch::StartsWith("rules.yaml:7: "));
}
