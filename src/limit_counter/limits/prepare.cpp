// LimitCounter's rules in force, and a decision prepared from them: the script call(s) of one
// transaction under the rules (one per slot on a Redis Cluster), its failure policy and what the
// exhausted cache answers first.
#include "limit_counter/limit_counter_impl.hpp"

#include <limitcounter/detail/lua_scripts.hpp>

#include "limit_counter/codec/common.hpp"
#include "limit_counter/codec/decide_arguments.hpp"
#include "limit_counter/codec/rule_args.hpp"
#include "limit_counter/rule_matching.hpp"
#include "limit_counter/share_plan.hpp"
#include "shared/amount.hpp"

namespace limitcounter {

using detail::quoted_id;

namespace {

// The limit script as `op` calls it: a check writes nothing, so it is called by the library's
// no-writes function, which Redis runs also when its memory is full.
const Script& limit_script(LimitOp op) {
  return op == LimitOp::check ? scripts::limit_read_only : scripts::limit;
}

} // namespace

void LimitCounter::Impl::set_rules(RuleSet rules, std::uint64_t version) {
  // One object holds both, so a decision never pairs a set with another set's version.
  auto built = std::make_shared<RulesInForce>(RulesInForce{std::move(rules), version, nullptr});
  built->args = std::make_shared<const detail::RuleSetArgs>(built->rules, keys_);
  std::shared_ptr<const RulesInForce> fresh = std::move(built);
  const std::lock_guard<std::mutex> lock(rules_mutex_);
  rules_ = std::move(fresh);
  if (exhausted_) {
    exhausted_->clear(); // the limits the cached denials were measured against may be gone
  }
}

std::shared_ptr<const RuleSet> LimitCounter::Impl::rules() const {
  const std::lock_guard<std::mutex> lock(rules_mutex_);
  // (aliasing: the set keeps its RulesInForce alive)
  return rules_ ? std::shared_ptr<const RuleSet>(rules_, &rules_->rules)
                : std::make_shared<const RuleSet>();
}

std::uint64_t LimitCounter::Impl::rule_set_version() const {
  const std::lock_guard<std::mutex> lock(rules_mutex_);
  return rules_ ? rules_->version : 0;
}

std::shared_ptr<const LimitCounter::Impl::RulesInForce>
LimitCounter::Impl::rules_to_decide(LimitOp op, const std::string& id) const {
  const std::lock_guard<std::mutex> lock(rules_mutex_);
  if (!rules_) {
    // Deciding against no rules at all is a deployment mistake far more often than intent:
    // it would allow everything and record it.
    throw Error(errc::invalid_argument,
                std::string(to_string(op)) + " of " + quoted_id(id) +
                    ": no rules were set (call set_rules; set_rules(RuleSet{}) allows every "
                    "transaction explicitly)");
  }
  return rules_;
}

LimitCounter::Impl::PreparedDecision
LimitCounter::Impl::prepare_decide(LimitOp op, const Transaction& transaction, const RuleSet& rules,
                                   const detail::RuleSetArgs* rule_args, TimePoint now) const {
  detail::validate_transaction(rules, transaction);
  if (!detail::quantity_ok(transaction.amount)) { // the message is built for a bad amount only
    detail::check_quantity(quoted_id(transaction.id) + " amount", transaction.amount);
  }
  if (options_.max_future_skew && transaction.time > now + *options_.max_future_skew) {
    throw Error(
        errc::invalid_argument,
        quoted_id(transaction.id) + " is dated " +
            std::to_string(detail::unix_millis(transaction.time) - detail::unix_millis(now)) +
            " ms in the future, more than max_future_skew (" +
            std::to_string(options_.max_future_skew->count()) + " ms)");
  }
  const auto matched = detail::match_rules(rules, transaction);

  PreparedDecision prepared;
  prepared.now = now;
  // Decided again by the script, which records the denial under the id; this copy decides
  // when Redis cannot be reached.
  for (const Rule* rule : matched.per_transaction) {
    if (transaction.amount > *rule->max_amount()) {
      prepared.single_denial =
          Denial{rule->name(), Metric::single_amount, *rule->max_amount(), 0, transaction.amount};
      break;
    }
  }
  if (exhausted_ && !prepared.single_denial) {
    consult_cache(op, transaction, rules, matched.window, prepared);
    if (prepared.cached) {
      return prepared;
    }
  }

  detail::DecideContext context;
  context.calendar = &calendar_;
  context.keys = &keys_;
  context.rule_args = rule_args;
  context.window_grace = options_.window_grace;
  context.replay_horizon = options_.replay_horizon;
  context.reservation_timeout = options_.reservation_timeout;
  context.now = now;
  // Without Redis, the strictest applicable policy decides: raise, then deny, then allow.
  const auto strictness = [](FailurePolicy policy) {
    switch (policy) {
    case FailurePolicy::raise: return 3;
    case FailurePolicy::deny: return 2;
    case FailurePolicy::local: return 1;
    case FailurePolicy::allow: return 0;
    }
    return 3;
  };
  if (!matched.window.empty()) {
    prepared.on_failure = FailurePolicy::allow;
    prepared.failure_rule = matched.window.front()->name();
    for (const Rule* rule : matched.window) {
      if (strictness(rule->failure_policy()) > strictness(prepared.on_failure)) {
        prepared.on_failure = rule->failure_policy();
        prepared.failure_rule = rule->name();
      }
    }
  }
  if (prepared.on_failure == FailurePolicy::local) {
    for (const Rule* rule : matched.window) {
      if (rule->failure_policy() != FailurePolicy::local) {
        continue;
      }
      const Window window = calendar_.window(*rule->period(), transaction.time);
      std::string field = detail::dimension_field(*rule, transaction);
      const std::string tag = keys_.tag(rule->counter_name(), field);
      prepared.local_counters.push_back({keys_.window(tag, *rule->period(), window.id),
                                         std::move(field), keys_.local_reports(tag),
                                         window.end + options_.window_grace, rule->max_count(),
                                         rule->max_amount(), rule->local_share()});
    }
  }
  if (redis_.is_cluster() && !matched.window.empty()) {
    // Every transaction goes through its home record, also one of one slot: which slots its
    // shares use depends on the rules in force (and the buckets), so a retry after a rules
    // change may compute another plan; only the home record, keyed by the id alone, finds the
    // first decision. One share per slot: the rules whose counters live there, with a record
    // of their own in the slot of the first one's counter tag. The shares hold a grace longer
    // than the home record, which decides a confirm (see `share_hold_grace`).
    prepared.home_hold_expiry =
        std::to_string(detail::unix_millis(now + options_.reservation_timeout));
    context.reservation_timeout += share_hold_grace();
    context.replay_horizon += detail::share_record_margin; // the home record's is the horizon
    for (const auto& [slot, tag, share_rules] :
         detail::share_plans(keys_, transaction, matched.window)) {
      const std::string record = keys_.transaction_share(tag, transaction.id);
      context.record_key = &record;
      auto call =
          detail::build_decide(op, transaction, matched.per_transaction, share_rules, context);
      prepared.shares.push_back(
          {&limit_script(op), std::move(call.keys), std::move(call.args), Resend::same_id});
      prepared.shapes.push_back(std::move(call.shape));
      prepared.share_tags.push_back(tag);
    }
    return prepared;
  }
  auto call =
      detail::build_decide(op, transaction, matched.per_transaction, matched.window, context);
  prepared.call = {&limit_script(op), std::move(call.keys), std::move(call.args)};
  prepared.shapes.push_back(std::move(call.shape));
  return prepared;
}

std::chrono::milliseconds LimitCounter::Impl::share_hold_grace() const {
  // Covers the confirm's fan-out after the home record took it (a few command timeouts at
  // most, retries included) and the clocks of the callers that release expired holds.
  if (!redis_.is_cluster()) {
    return std::chrono::milliseconds{0};
  }
  return options_.cluster_hold_grace.value_or(std::max<std::chrono::milliseconds>(
      std::chrono::seconds{30}, redis_.options().command_timeout * 10));
}

} // namespace limitcounter
