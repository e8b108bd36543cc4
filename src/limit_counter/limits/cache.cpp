// LimitCounter and its exhausted cache (LimitCounterOptions::exhausted_cache): what a
// decision asks the cache before it is sent, and what the cache learns from Redis's answer.
#include "limit_counter/limit_counter_impl.hpp"

#include "limit_counter/exhausted_cache.hpp"
#include "limit_counter/rule_matching.hpp"

namespace limitcounter {

void LimitCounter::Impl::consult_cache(LimitOp op, const Transaction& transaction,
                                       const RuleSet& rules,
                                       const std::vector<const Rule*>& window_rules,
                                       PreparedDecision& prepared) const {
  {
    // Taken before the call is sent, so a denial that may predate a refund or a rule change
    // is not remembered; `set_rules` clears under the same lock, so a decision by rules
    // already replaced never matches the current generation.
    const std::lock_guard<std::mutex> lock(rules_mutex_);
    prepared.cache_generation =
        exhausted_->generation() - (rules_ && &rules_->rules == &rules ? 0 : 1);
  }
  prepared.places.reserve(window_rules.size());
  const TimePoint now = Clock::now();
  bool closed = false;
  for (const Rule* rule : window_rules) {
    const Window window = calendar_.window(*rule->period(), transaction.time);
    prepared.places.push_back(detail::exhausted_place(
        rule->name(), window.id, detail::dimension_field(*rule, transaction), window.end));
    closed = closed || window.end + options_.window_grace <= now;
  }
  if (closed) {
    return; // window_closed is for the call to throw, not a denial to give
  }
  auto denial = exhausted_->lookup(prepared.places, transaction.id, transaction.amount,
                                   transaction.time, now, std::chrono::steady_clock::now());
  if (!denial) {
    return;
  }
  Decision decision;
  decision.verdict = Decision::Verdict::denied;
  decision.state = detail::decided_state(op, false);
  decision.dry_run = op == LimitOp::check;
  decision.cached = true;
  decision.denial = std::move(denial);
  prepared.cached = std::move(decision);
}

void LimitCounter::Impl::learn(LimitOp op, const Transaction& transaction,
                               const PreparedDecision& prepared, const Decision* decision,
                               const Error* error) const {
  if (!exhausted_) {
    return;
  }
  if (error) {
    if (error->outcome() == Outcome::unknown) {
      exhausted_->unsettled(transaction.id); // its retry must reach Redis, which replays
    }
    return;
  }
  exhausted_->settled(transaction.id);
  if (decision->replayed || decision->degraded) {
    return; // a replay's counters are those of its first call
  }
  if (decision->allowed()) {
    if (op == LimitOp::reserve) {
      const TimePoint now = Clock::now();
      exhausted_->note_hold(prepared.places,
                            now + options_.reservation_timeout + share_hold_grace(), now);
    }
    return;
  }
  // A check releases no expired hold, so its denial may be one a consume would not give.
  if (op == LimitOp::check || !decision->denial) {
    return;
  }
  for (const auto& place : prepared.places) {
    if (place.rule == decision->denial->rule) {
      // A hold of this process that was live at the call's `now` may be what denied it.
      exhausted_->remember(place, *decision->denial, prepared.cache_generation, prepared.now,
                           std::chrono::steady_clock::now());
      return;
    }
  }
}

Reply LimitCounter::Impl::freeing_transition(LimitOp op, const std::string& transaction_id,
                                             const std::vector<std::string>& args,
                                             const Transaction* original) {
  if (!exhausted_) {
    return run_transition(op, transaction_id, args, original);
  }
  // Dropped after the call, also when it failed or may have run: a denial remembered
  // meanwhile began before this clear, so its generation keeps it out.
  try {
    Reply reply = run_transition(op, transaction_id, args, original);
    exhausted_->clear();
    return reply;
  } catch (...) {
    exhausted_->clear();
    throw;
  }
}

} // namespace limitcounter
