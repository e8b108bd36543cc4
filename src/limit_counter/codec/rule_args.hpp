#pragma once
// What a decide call of lua/limit.lua takes from each rule whatever the transaction, built once
// per rule set. Pure; unit-tested without a server.

#include <cstdint>
#include <string>
#include <vector>

#include <limitcounter/keys.hpp>
#include <limitcounter/rule.hpp>

namespace limitcounter::detail {

/// What a decide call takes from one rule whatever the transaction, built once per rule set
/// (`RuleSetArgs`) so that a call copies it instead of building it.
struct RuleArgs {
  std::string counter_name;
  /// With one bucket, where the counter name is the tag: `<prefix>{<counter name>}:`, the
  /// head of the rule's window keys. Empty with several buckets, where the tag depends on the
  /// dimension.
  std::string window_key_head;
};

/// The RuleArgs of `rule` under `keys`.
RuleArgs rule_args(const Rule& rule, const CounterKeys& keys);

/// The RuleArgs of every rule of one rule set under one CounterKeys. Immutable once built, so
/// any thread may read it; it is only valid while that rule set lives unchanged (the set in
/// force holds it, and `set_rules` replaces both together).
class RuleSetArgs {
public:
  RuleSetArgs(const RuleSet& rules, const CounterKeys& keys);
  /// The args of `rule` if it is one of the set's rules (by address), else nullptr.
  const RuleArgs* find(const Rule* rule) const noexcept;
  /// A number no other RuleSetArgs of this process has (1, 2, ...): what a call template kept
  /// for these args is known by, so that it never serves another rule set at the same address.
  std::uint64_t id() const noexcept { return id_; }

private:
  std::uint64_t id_;
  const std::vector<Rule>* rules_;
  std::vector<RuleArgs> args_;
};

} // namespace limitcounter::detail
