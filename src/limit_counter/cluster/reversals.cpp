// LimitCounter on a Redis Cluster: confirm, cancel and refund decided at the home record and
// then applied to every share of its plan; with the original a host kept, checked against (or,
// past the replay horizon, recorded anew at) the home record first.
#include "limit_counter/limit_counter_impl.hpp"

#include <algorithm>

#include <limitcounter/detail/lua_scripts.hpp>

#include "limit_counter/codec/common.hpp"
#include "limit_counter/codec/decide_arguments.hpp"
#include "limit_counter/codec/reply_status.hpp"
#include "limit_counter/codec/reversals.hpp"
#include "limit_counter/declared_keys.hpp"
#include "limit_counter/share_plan.hpp"
#include "redis/operation_resends.hpp"
#include "shared/amount.hpp"

namespace limitcounter {

using detail::quoted_id;
using detail::reply_status;
using detail::ReplyStatus;

// What each share runs to follow its home record's answer `home` to `args`. Every share is
// first brought to the home record's state, so that operations racing each other's fan-outs
// (a refund overtaking the confirm it follows) reach every share in the same order. A share
// follows a confirm its home record made even if its own hold has run out ("now" 0), and an
// expiry its home record decided even if its own hold has not.
std::vector<std::vector<std::string>>
LimitCounter::Impl::share_operations(LimitOp op, const std::vector<std::string>& args,
                                     const Reply& home) {
  const ReplyStatus status = reply_status(home);
  if (status == ReplyStatus::expired) { // (a confirm or a cancel that found the hold run out)
    return {detail::expire_share()};
  }
  if (op == LimitOp::confirm) {
    return {{"confirm", home.at(status == ReplyStatus::already ? 2 : 1).as_string(), "0"}};
  }
  if (op == LimitOp::cancel) {
    std::vector<std::string> probe = args; // a share without a record needs no tombstone
    probe.emplace_back("probe");
    return {probe};
  }
  // a refund of a confirmed reservation: the confirm first, at the home record's amount
  return {{"confirm", home.at(3).as_string(), "0"}, args};
}

namespace {

// A confirmed transaction (a confirm, or a refund following one) whose share had released its
// hold as expired before it followed: the shapes disagree for good. The home record's decision
// stands (Outcome::unknown: it ran), and every retry says the same, as the sweep does.
void throw_if_lost_hold(const std::string& transaction_id, const std::vector<std::string>& plan,
                        const std::vector<Reply>& replies) {
  const std::size_t per_share = replies.size() / std::max<std::size_t>(plan.size(), 1);
  for (std::size_t i = 0; i < replies.size(); ++i) {
    if (detail::lost_hold(replies[i])) {
      throw Error(errc::conflict,
                  quoted_id(transaction_id) + " is confirmed at its home record, but its share " +
                      plan[i / per_share] +
                      " had released its hold as expired before it followed: that share's " +
                      "counters do not count it (correct them with adjust)",
                  Outcome::unknown);
    }
  }
}

} // namespace

Reply LimitCounter::Impl::run_transition(LimitOp op, const std::string& transaction_id,
                                         const std::vector<std::string>& args,
                                         const Transaction* original) {
  const detail::OperationResends resends(redis_); // (one budget for all the steps)
  if (redis_.is_cluster()) {
    std::vector<ScriptCall> refunds_with_original;
    bool home_record = true;
    if (original != nullptr) {
      const Reply checked =
          check_original_at_home(op, transaction_id, args, *original, refunds_with_original);
      const ReplyStatus status = reply_status(checked);
      if (status == ReplyStatus::mismatch) {
        return checked;
      }
      home_record = status == ReplyStatus::adopted || status == ReplyStatus::exists;
    }
    if (home_record) {
      Reply home = run_home(transaction_id, args);
      if (reply_status(home) != ReplyStatus::missing) {
        follow_home_change(op, transaction_id, args, home, refunds_with_original);
        return home;
      }
      // (else the home key holds a lua/limit.lua record, or nothing: then a cancel without the
      // original wrote its tombstone)
    }
  }
  // A lua/limit.lua record: standalone, or on a cluster one of a transaction without window
  // rules, a tombstone, or with the original, the record of one past its horizon.
  std::vector<std::string> keys{keys_.transaction(transaction_id)};
  if (original == nullptr) {
    return detail::eval_declaring(redis_,
                                  {&scripts::limit, std::move(keys), args, Resend::same_id});
  }
  std::vector<std::string> with_original = args;
  std::shared_ptr<const RulesInForce> in_force;
  std::vector<const Rule*> window_rules = original_window_rules(op, *original, in_force);
  if (redis_.is_cluster()) {
    // A reservation's hold never outlives its home record, and a refund with window rules was
    // recorded at the home record: the record here moves no counter.
    window_rules.clear();
  }
  std::string counter_set =
      append_original_args(op, with_original, *original, window_rules, keys[0]);
  if (!counter_set.empty()) {
    keys.push_back(std::move(counter_set));
  }
  return detail::eval_declaring(
      redis_, {&scripts::limit, std::move(keys), std::move(with_original), Resend::same_id});
}

void LimitCounter::Impl::follow_home_change(LimitOp op, const std::string& transaction_id,
                                            const std::vector<std::string>& args, const Reply& home,
                                            const std::vector<ScriptCall>& refunds_with_original) {
  const ReplyStatus status = reply_status(home);
  const bool applies = status == ReplyStatus::confirmed || status == ReplyStatus::already ||
                       status == ReplyStatus::expired || status == ReplyStatus::cancelled ||
                       status == ReplyStatus::refunded;
  if (!applies) {
    return;
  }
  const std::vector<std::string> plan =
      share_records(transaction_id, home.as_array().back().as_string());
  std::vector<Reply> replies;
  try {
    replies = run_on_shares(plan, share_operations(op, args, home), refunds_with_original);
  } catch (const Error& e) {
    throw Error(static_cast<errc>(e.code().value()),
                std::string(to_string(op)) + " of " + quoted_id(transaction_id) +
                    " is decided at its home record, but not every share followed yet (" +
                    e.what() + "): retry it",
                Outcome::unknown);
  }
  if (status != ReplyStatus::expired && op != LimitOp::cancel) {
    throw_if_lost_hold(transaction_id, plan, replies);
  }
  if (refunds_with_original.empty()) {
    if (op == LimitOp::refund) {
      // A share without a record under a home record that lives: the home record was recorded
      // anew past the horizon (adopt) by a refund with the original whose shares are not yet
      // recorded anew. This refund is decided at the home record, but only a refund with the
      // original can give back there: not "refunded" until it has.
      const std::size_t per_share = replies.size() / std::max<std::size_t>(plan.size(), 1);
      for (std::size_t i = per_share - 1; i < replies.size(); i += per_share) {
        if (reply_status(replies[i]) == ReplyStatus::unknown) {
          throw Error(errc::not_found,
                      "refund of " + quoted_id(transaction_id) +
                          " is decided at its home record, but its share " + plan[i / per_share] +
                          " has no record (past the replay horizon): retry it with the "
                          "original transaction",
                      Outcome::unknown);
        }
      }
    }
    return;
  }
  // past the horizon, every share gives back its part (recorded anew from the original)
  const std::size_t per_share = replies.size() / std::max<std::size_t>(plan.size(), 1);
  for (std::size_t i = per_share - 1; i < replies.size(); i += per_share) {
    if (reply_status(replies[i]) != ReplyStatus::refunded) {
      throw Error(errc::conflict,
                  "refund of " + quoted_id(transaction_id) +
                      " is decided at its home record, but its share " + plan[i / per_share] +
                      " answered " + replies[i].debug_string() +
                      " (its record is gone and the rules in force put its counters elsewhere): "
                      "correct its counters with adjust",
                  Outcome::unknown);
    }
  }
}

// With the original a host kept: its home record, if there is one, must be of that transaction
// (lua/transaction_home.lua, op adopt). A refund of one whose home record is gone (past the
// replay horizon) records it anew as consumed, under the shares the original has under the
// rules in force, and fills `refunds_with_original` with each share's refund that records its
// share anew from the original if its record is gone too. A retry with the same original
// replays each step. Reply: adopt's, or {"none"} (no home record: a confirm or cancel answers
// as lua/limit.lua does with the original) or {"missing"} (a lua/limit.lua record is there).
Reply LimitCounter::Impl::check_original_at_home(LimitOp op, const std::string& transaction_id,
                                                 const std::vector<std::string>& args,
                                                 const Transaction& original,
                                                 std::vector<ScriptCall>& refunds_with_original) {
  // A share's record must not expire before its home record, or a retry replayed at the home
  // record gives back again in the share: the shares' records (append_original_args) are taken
  // later and live `share_record_margin` longer.
  const std::string home_expiry =
      std::to_string(detail::unix_millis(Clock::now() + options_.replay_horizon));
  std::shared_ptr<const RulesInForce> in_force;
  const std::vector<const Rule*> window_rules = original_window_rules(op, original, in_force);
  std::vector<std::string> tags;
  if (op == LimitOp::refund) {
    for (const auto& share : detail::share_plans(keys_, original, window_rules)) {
      std::string record = keys_.transaction_share(share.tag, original.id);
      std::vector<std::string> share_args = args;
      std::string counter_set = append_original_args(op, share_args, original, share.rules, record);
      refunds_with_original.push_back({&scripts::limit,
                                       {std::move(record), std::move(counter_set)},
                                       std::move(share_args),
                                       Resend::same_id});
      tags.push_back(share.tag);
    }
  }
  return run_home(transaction_id,
                  {"adopt", detail::fingerprint(LimitOp::consume, original),
                   detail::joined_lines(tags), home_expiry,
                   detail::fingerprint(LimitOp::reserve, original), std::to_string(original.amount),
                   tags.empty() ? "compare" : "create"});
}

} // namespace limitcounter
