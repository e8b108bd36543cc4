#pragma once
// Rules: "at most N transactions / X amount per dimension per period", and
// "a single transaction at most X".

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <limitcounter/calendar.hpp>

namespace limitcounter {

/// The value of a rule condition that matches any value of its attribute.
inline constexpr std::string_view any_value = "*";

/// One attribute condition of a rule: `dept = cmb`, or `merchant = *` (any merchant).
struct Condition {
  std::string attribute; ///< a transaction attribute the rule set knows, e.g. "dept"
  std::string value;     ///< an exact value, or "*" for any value

  /// True for "*" (any value).
  bool is_wildcard() const noexcept { return value == any_value; }
};

/// What a rule decides when Redis cannot answer (down, timed out, breaker open).
enum class FailurePolicy {
  raise, ///< throw the Error (the default: the host decides)
  allow, ///< fail open: allow, marked degraded
  deny,  ///< fail closed: deny, marked degraded
  local, ///< allow while this node's own share of the limit lasts (see Rule::on_redis_failure)
};

/// A limit on the transactions that match its conditions. Built fluently:
///
///     Rule("cmb-daily").where("dept", "cmb").per(Period::day).max_count(1000)
///     Rule("merchant-daily").where("merchant").per(Period::day).max_amount(10'000'000)
///     Rule("single").where("merchant").per_transaction().max_amount(500'00)
///
/// The attributes of the conditions, in order, are the rule's *shape*; the transaction's
/// values of those attributes, joined with '+', are the counter's dimension, and the shape
/// joined with '+' names the counter (`channel+transType+dept`). Rules of one shape and
/// period share their counters, so replacing a rule never loses what was counted.
///
/// For one transaction and one shape, period and kind, only the most specific matching
/// rules apply (most exact values): `dept = cmb` overrides `dept = *` for cmb only.
/// Amounts are minor units. Validation happens when the rule is added to a `RuleSet`.
class Rule {
public:
  /// A window rule counts per period window; a per-transaction rule caps each amount.
  enum class Kind { window, per_transaction };

  /// `name` identifies the rule in decisions; a key part (letters, digits, '-', '_', ...).
  explicit Rule(std::string name) : name_(std::move(name)) {}

  /// Adds the condition `attribute = value`; `value` "*" (the default) matches any value.
  Rule& where(std::string attribute, std::string value = std::string(any_value)) {
    conditions_.push_back({std::move(attribute), std::move(value)});
    return *this;
  }
  /// Makes this a window rule counted per `period` window.
  Rule& per(Period period) {
    kind_ = Kind::window;
    period_ = period;
    return *this;
  }
  /// Makes this a limit on each single transaction's amount (no counter).
  Rule& per_transaction() {
    kind_ = Kind::per_transaction;
    period_.reset();
    return *this;
  }
  /// At most `limit` transactions per window (window rules only).
  Rule& max_count(std::int64_t limit) {
    max_count_ = limit;
    return *this;
  }
  /// At most `limit` minor units per window, or per transaction.
  Rule& max_amount(std::int64_t limit) {
    max_amount_ = limit;
    return *this;
  }
  /// What this rule decides when Redis cannot answer. When the rules of a transaction
  /// disagree, raise beats deny beats local beats allow. With `local`, this node alone may
  /// allow up to `local_share` (0 < share <= 1) of each limit per window while Redis is
  /// down; what it allowed is added to the Redis counters once Redis answers again.
  Rule& on_redis_failure(FailurePolicy policy, double local_share = 0.0) {
    failure_policy_ = policy;
    local_share_ = local_share;
    return *this;
  }
  /// Allows limits of 0: the rule then denies every transaction it matches.
  Rule& blocking() {
    blocking_ = true;
    return *this;
  }

  /// The name given at construction.
  const std::string& name() const noexcept { return name_; }
  /// The conditions, in the order `where` added them (the shape's order).
  const std::vector<Condition>& conditions() const noexcept { return conditions_; }
  /// Window (the default) or per transaction.
  Kind kind() const noexcept { return kind_; }
  /// The window period of a window rule; empty for per-transaction rules and unfinished rules.
  std::optional<Period> period() const noexcept { return period_; }
  /// Transactions per window; empty when not set.
  std::optional<std::int64_t> max_count() const noexcept { return max_count_; }
  /// Minor units per window or per transaction; empty when not set.
  std::optional<std::int64_t> max_amount() const noexcept { return max_amount_; }
  /// Whether `blocking()` was called (limits of 0 allowed).
  bool is_blocking() const noexcept { return blocking_; }
  /// What the rule decides when Redis cannot answer; FailurePolicy::raise by default.
  FailurePolicy failure_policy() const noexcept { return failure_policy_; }
  /// The share of each limit this node may allow alone under FailurePolicy::local (0 if unset).
  double local_share() const noexcept { return local_share_; }
  /// The counter name: the shape's attributes joined with '+', e.g. `channel+transType+dept`.
  std::string counter_name() const;
  /// How many conditions name an exact value.
  std::size_t specificity() const noexcept;

private:
  std::string name_;
  std::vector<Condition> conditions_;
  Kind kind_ = Kind::window;
  std::optional<Period> period_;
  std::optional<std::int64_t> max_count_;
  std::optional<std::int64_t> max_amount_;
  bool blocking_ = false;
  FailurePolicy failure_policy_ = FailurePolicy::raise;
  double local_share_ = 0.0;
};

/// A validated set of rules, built by the host in code. Immutable once handed to a
/// `LimitCounter` (`set_rules` swaps in a new set atomically; counters are kept).
class RuleSet {
public:
  /// The transaction attributes rules may name; any other attribute is an error.
  static std::vector<std::string> default_attributes() {
    return {"merchant", "channel", "transType", "dept", "user", "card", "account"};
  }

  /// An empty set whose rules may name `attributes`. Throws `Error` (invalid_argument) naming
  /// an attribute that is not a valid key part.
  explicit RuleSet(std::vector<std::string> attributes = default_attributes());

  /// Validates `rule` and adds it. Throws `Error` (invalid_argument) naming the rule and the
  /// problem: bad or duplicate name, no condition, unknown attribute, an attribute twice,
  /// bad value, no period for a window rule, no limit, a count limit on a per-transaction
  /// rule, a limit <= 0 (unless blocking) or >= 2^53, or the same conditions, kind and period
  /// as an existing rule.
  RuleSet& add(Rule rule);

  /// The rules, in the order they were added.
  const std::vector<Rule>& rules() const noexcept { return rules_; }
  /// The attributes given at construction.
  const std::vector<std::string>& attributes() const noexcept { return attributes_; }
  /// Whether `attribute` is one of the attributes this set knows.
  bool knows(std::string_view attribute) const noexcept;

private:
  std::vector<std::string> attributes_;
  std::vector<Rule> rules_;
};

} // namespace limitcounter
