#include <limitcounter/rule.hpp>

#include <algorithm>

#include <limitcounter/error.hpp>
#include <limitcounter/key_part.hpp>
#include <limitcounter/usage.hpp>

namespace limitcounter {
namespace {

std::string describe(const Rule& rule) { return "rule \"" + rule.name() + "\""; }

void check_limit(const Rule& rule, const char* which, std::optional<std::int64_t> limit) {
  if (!limit) {
    return;
  }
  const bool too_low = rule.is_blocking() ? *limit < 0 : *limit <= 0;
  if (too_low || *limit > max_exact_integer) {
    throw Error(errc::invalid_argument,
                describe(rule) + ": " + which + " " + std::to_string(*limit) +
                    (too_low ? (rule.is_blocking() ? " is negative"
                                                   : " must be positive (use blocking() to block)")
                             : " is 2^53 or more"));
  }
}

bool same_conditions(const Rule& a, const Rule& b) {
  const auto& x = a.conditions();
  const auto& y = b.conditions();
  return x.size() == y.size() &&
         std::equal(x.begin(), x.end(), y.begin(), [](const Condition& l, const Condition& r) {
           return l.attribute == r.attribute && l.value == r.value;
         });
}

} // namespace

std::string Rule::counter_name() const {
  std::string name;
  for (const auto& condition : conditions_) {
    if (!name.empty()) {
      name += '+';
    }
    name += condition.attribute;
  }
  return name;
}

std::size_t Rule::specificity() const noexcept {
  return static_cast<std::size_t>(std::count_if(
      conditions_.begin(), conditions_.end(), [](const Condition& c) { return !c.is_wildcard(); }));
}

RuleSet::RuleSet(std::vector<std::string> attributes) : attributes_(std::move(attributes)) {
  for (const auto& attribute : attributes_) {
    validate_key_part("attribute name", attribute);
  }
}

bool RuleSet::knows(std::string_view attribute) const noexcept {
  return std::find(attributes_.begin(), attributes_.end(), attribute) != attributes_.end();
}

RuleSet& RuleSet::add(Rule rule) {
  validate_key_part("rule name", rule.name());
  if (rule.conditions().empty()) {
    throw Error(errc::invalid_argument, describe(rule) + " has no condition (add where(...))");
  }
  for (std::size_t i = 0; i < rule.conditions().size(); ++i) {
    const auto& condition = rule.conditions()[i];
    if (!knows(condition.attribute)) {
      throw Error(errc::invalid_argument, describe(rule) + " names unknown attribute " +
                                              detail::quote_for_message(condition.attribute));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (rule.conditions()[j].attribute == condition.attribute) {
        throw Error(errc::invalid_argument,
                    describe(rule) + " names attribute \"" + condition.attribute + "\" twice");
      }
    }
    if (!condition.is_wildcard()) {
      validate_key_part(describe(rule) + " value of " + condition.attribute, condition.value);
    }
  }
  if (rule.kind() == Rule::Kind::window) {
    if (!rule.period()) {
      throw Error(errc::invalid_argument,
                  describe(rule) + " has no period (use per(Period::day) or per_transaction())");
    }
    if (!rule.max_count() && !rule.max_amount()) {
      throw Error(errc::invalid_argument, describe(rule) + " has no max_count and no max_amount");
    }
  } else {
    if (rule.max_count()) {
      throw Error(errc::invalid_argument,
                  describe(rule) + ": a per-transaction rule limits the amount, not a count");
    }
    if (!rule.max_amount()) {
      throw Error(errc::invalid_argument, describe(rule) + " has no max_amount");
    }
  }
  if (rule.failure_policy() == FailurePolicy::local &&
      !(rule.local_share() > 0.0 && rule.local_share() <= 1.0)) {
    throw Error(errc::invalid_argument, describe(rule) + ": local share " +
                                            std::to_string(rule.local_share()) +
                                            " must be above 0 and at most 1");
  }
  check_limit(rule, "max_count", rule.max_count());
  check_limit(rule, "max_amount", rule.max_amount());
  for (const auto& existing : rules_) {
    if (existing.name() == rule.name()) {
      throw Error(errc::invalid_argument, describe(rule) + " is added twice");
    }
    if (existing.kind() == rule.kind() && existing.period() == rule.period() &&
        same_conditions(existing, rule)) {
      throw Error(errc::invalid_argument,
                  describe(rule) + " duplicates " + describe(existing) +
                      " (same conditions and period: put both limits in one rule)");
    }
  }
  rules_.push_back(std::move(rule));
  return *this;
}

} // namespace limitcounter
