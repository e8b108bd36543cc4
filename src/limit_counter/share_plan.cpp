#include "limit_counter/share_plan.hpp"

#include <algorithm>

#include "limit_counter/rule_matching.hpp"
#include "redis/key_slot.hpp"

namespace limitcounter::detail {

std::vector<SharePlan> share_plans(const CounterKeys& keys, const Transaction& transaction,
                                   const std::vector<const Rule*>& window_rules) {
  std::vector<SharePlan> plans;
  for (const Rule* rule : window_rules) {
    std::string tag = keys.tag(rule->counter_name(), dimension_field(*rule, transaction));
    const std::uint16_t slot = key_slot(CounterKeys::slot_tag(tag));
    auto share = std::find_if(plans.begin(), plans.end(),
                              [&](const SharePlan& plan) { return plan.slot == slot; });
    if (share == plans.end()) {
      share = plans.insert(plans.end(), {slot, std::move(tag), {}});
    }
    share->rules.push_back(rule);
  }
  return plans;
}

std::vector<std::string> void_share(std::chrono::system_clock::time_point now,
                                    std::chrono::milliseconds replay_horizon,
                                    const std::string& fingerprint) {
  const auto expiry = now + replay_horizon + share_record_margin;
  return {
      "void",
      std::to_string(
          std::chrono::duration_cast<std::chrono::milliseconds>(expiry.time_since_epoch()).count()),
      fingerprint};
}

std::string joined_lines(const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& line : lines) {
    text.append(text.empty() ? "" : "\n").append(line);
  }
  return text;
}

} // namespace limitcounter::detail
