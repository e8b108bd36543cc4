#pragma once
// Which rules apply to a transaction. Pure; unit-tested without a server.

#include <string>
#include <vector>

#include <limitcounter/rule.hpp>
#include <limitcounter/transaction.hpp>

namespace limitcounter::detail {

struct MatchedRules {
  std::vector<const Rule*> per_transaction; ///< single-amount limits, decided by the script too
  std::vector<const Rule*> window;          ///< window limits, checked in Redis
};

/// Throws `Error` (invalid_argument) naming the attribute if the transaction has an
/// attribute the rule set does not know, a bad value, or lacks an attribute a rule names.
void validate_transaction(const RuleSet& rules, const Transaction& transaction);

/// The rules that apply to `transaction`: those whose conditions all hold, keeping, for
/// each shape, kind and period, only the most specific (an exact `dept = cmb` overrides
/// `dept = *`; rules of equal specificity all apply). Rule-set order is kept. The
/// transaction must have been validated.
MatchedRules match_rules(const RuleSet& rules, const Transaction& transaction);

/// The dimension `transaction` counts in for `rule`: its values of the rule's attributes,
/// joined with '+' (the field of the rule's counter). The transaction must have been validated.
std::string dimension_field(const Rule& rule, const Transaction& transaction);

} // namespace limitcounter::detail
