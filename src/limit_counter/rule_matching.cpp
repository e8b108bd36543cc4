#include "limit_counter/rule_matching.hpp"

#include <algorithm>
#include <string>

#include <limitcounter/error.hpp>
#include <limitcounter/key_part.hpp>

namespace limitcounter::detail {
namespace {

bool same_shape(const Rule& a, const Rule& b) {
  if (a.kind() != b.kind() || a.period() != b.period() ||
      a.conditions().size() != b.conditions().size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.conditions().size(); ++i) {
    if (a.conditions()[i].attribute != b.conditions()[i].attribute) {
      return false;
    }
  }
  return true;
}

bool holds(const Rule& rule, const Transaction& transaction) {
  for (const auto& condition : rule.conditions()) {
    if (!condition.is_wildcard() &&
        transaction.attributes.at(condition.attribute) != condition.value) {
      return false;
    }
  }
  return true;
}

} // namespace

void validate_transaction(const RuleSet& rules, const Transaction& transaction) {
  validate_key_part("transaction id", transaction.id, ":");
  for (const auto& [attribute, value] : transaction.attributes) {
    if (!rules.knows(attribute)) {
      throw Error(errc::invalid_argument, "transaction " + transaction.id +
                                              " has unknown attribute " +
                                              quote_for_message(attribute));
    }
    // The message naming the transaction and the attribute is built only for a bad value.
    if (key_part_problem(value, {})) {
      validate_key_part("transaction " + transaction.id + " " + attribute, value);
    }
    if (value == any_value) {
      throw Error(errc::invalid_argument, "transaction " + transaction.id + " " + attribute +
                                              " \"*\" is the wildcard, not a value");
    }
  }
  for (const auto& rule : rules.rules()) {
    for (const auto& condition : rule.conditions()) {
      if (transaction.attributes.count(condition.attribute) == 0) {
        throw Error(errc::invalid_argument, "transaction " + transaction.id +
                                                " lacks attribute \"" + condition.attribute +
                                                "\" that rule \"" + rule.name() + "\" needs");
      }
    }
  }
}

MatchedRules match_rules(const RuleSet& rules, const Transaction& transaction) {
  struct Matching {
    const Rule* rule;
    std::size_t specificity;
  };
  std::vector<Matching> matching;
  matching.reserve(rules.rules().size());
  for (const auto& rule : rules.rules()) {
    if (holds(rule, transaction)) {
      matching.push_back({&rule, rule.specificity()});
    }
  }
  MatchedRules matched;
  matched.window.reserve(matching.size());
  for (const Matching& candidate : matching) {
    // Only a more specific rule can override: the shapes are compared for those alone.
    const bool overridden =
        std::any_of(matching.begin(), matching.end(), [&](const Matching& other) {
          return other.specificity > candidate.specificity &&
                 same_shape(*candidate.rule, *other.rule);
        });
    if (!overridden) {
      (candidate.rule->kind() == Rule::Kind::window ? matched.window : matched.per_transaction)
          .push_back(candidate.rule);
    }
  }
  return matched;
}

std::string dimension_field(const Rule& rule, const Transaction& transaction) {
  if (rule.conditions().size() == 1) { // most rules: the value itself, copied once
    return transaction.attributes.at(rule.conditions().front().attribute);
  }
  std::string field;
  for (const auto& condition : rule.conditions()) {
    if (!field.empty()) {
      field += '+';
    }
    field += transaction.attributes.at(condition.attribute);
  }
  return field;
}

} // namespace limitcounter::detail
