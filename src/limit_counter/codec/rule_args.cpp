#include "limit_counter/codec/rule_args.hpp"

#include <atomic>
#include <functional>

#include <limitcounter/calendar.hpp>

namespace limitcounter::detail {

namespace {

std::uint64_t next_rule_set_args_id() {
  static std::atomic<std::uint64_t> last{0};
  return ++last;
}

} // namespace

RuleArgs rule_args(const Rule& rule, const CounterKeys& keys) {
  RuleArgs args;
  args.counter_name = rule.counter_name();
  if (keys.buckets() == 1) {
    const std::string tag = keys.bucket_tag(args.counter_name, 0);
    // `<prefix>{<tag>}:day:` less its period: what every period's window key begins with
    args.window_key_head = keys.window(tag, Period::day, "");
    args.window_key_head.resize(args.window_key_head.size() - to_string(Period::day).size() - 1);
  }
  return args;
}

RuleSetArgs::RuleSetArgs(const RuleSet& rules, const CounterKeys& keys)
    : id_(next_rule_set_args_id()), rules_(&rules.rules()) {
  args_.reserve(rules_->size());
  for (const Rule& rule : *rules_) {
    args_.push_back(rule_args(rule, keys));
  }
}

const RuleArgs* RuleSetArgs::find(const Rule* rule) const noexcept {
  const std::less<const Rule*> before;
  const Rule* first = rules_->data();
  if (rules_->size() != args_.size() || before(rule, first) ||
      !before(rule, first + rules_->size())) {
    return nullptr;
  }
  return &args_[static_cast<std::size_t>(rule - first)];
}

} // namespace limitcounter::detail
