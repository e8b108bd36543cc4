#include "limit_counter/rule_matching.hpp"

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
    validate_key_part("transaction " + transaction.id + " " + attribute, value);
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
  std::vector<const Rule*> matching;
  for (const auto& rule : rules.rules()) {
    if (holds(rule, transaction)) {
      matching.push_back(&rule);
    }
  }
  MatchedRules matched;
  for (const Rule* rule : matching) {
    bool overridden = false;
    for (const Rule* other : matching) {
      if (other != rule && same_shape(*rule, *other) &&
          other->specificity() > rule->specificity()) {
        overridden = true;
        break;
      }
    }
    if (!overridden) {
      (rule->kind() == Rule::Kind::window ? matched.window : matched.per_transaction)
          .push_back(rule);
    }
  }
  return matched;
}

std::string dimension_field(const Rule& rule, const Transaction& transaction) {
  std::string field;
  for (const auto& condition : rule.conditions()) {
    field += (field.empty() ? "" : "+") + transaction.attributes.at(condition.attribute);
  }
  return field;
}

} // namespace limitcounter::detail
