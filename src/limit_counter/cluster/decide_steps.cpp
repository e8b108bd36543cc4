// LimitCounter on a Redis Cluster: what the replies of a decision's steps decide (begin at the
// home record, the shares, finish at the home record), the home record's decision replayed, and
// a denied transaction's shares voided.
#include "limit_counter/limit_counter_impl.hpp"

#include "limit_counter/codec/common.hpp"
#include "limit_counter/codec/record_text.hpp"
#include "limit_counter/codec/reply_status.hpp"
#include "limit_counter/share_plan.hpp"

namespace limitcounter {

using detail::quoted_id;
using detail::reply_status;
using detail::ReplyStatus;

std::optional<Decision> LimitCounter::Impl::after_begin(const Transaction& transaction,
                                                        const PreparedDecision& prepared,
                                                        const Reply& begun) {
  const ReplyStatus status = reply_status(begun);
  if (status == ReplyStatus::conflict) {
    throw detail::reused_id(transaction.id);
  }
  if (status == ReplyStatus::cancelled) {
    Decision decision;
    decision.verdict = Decision::Verdict::cancelled;
    decision.replayed = true;
    decision.state = TransactionState::cancelled;
    return decision;
  }
  if (status == ReplyStatus::final_) {
    return replay_home(transaction, begun);
  }
  if (status != ReplyStatus::go) {
    throw Error(errc::protocol_error,
                "transaction_home begin: unexpected reply " + begun.debug_string(),
                Outcome::unknown);
  }
  if (begun.at(1).as_string() != detail::joined_lines(prepared.share_tags)) {
    throw Error(errc::conflict,
                "the rules changed while " + quoted_id(transaction.id) +
                    " was being decided by another caller: retry it",
                Outcome::failed);
  }
  return std::nullopt;
}

LimitCounter::Impl::SharesDecided
LimitCounter::Impl::after_shares(LimitOp op, const Transaction& transaction,
                                 const PreparedDecision& prepared,
                                 const std::vector<Reply>& replies) {
  SharesDecided decided;
  Decision& combined = decided.combined;
  std::optional<Error> share_error;
  bool voided_share = false;
  for (std::size_t i = 0; i < replies.size(); ++i) {
    try {
      const Decision part = finish_decide(op, transaction, prepared.shapes[i], replies[i]);
      decided.replayed_share = decided.replayed_share || part.replayed;
      voided_share = voided_share || (part.replayed && part.state == TransactionState::voided);
      combined.rules.insert(combined.rules.end(), part.rules.begin(), part.rules.end());
      if (part.allowed() && part.state != TransactionState::voided) {
        decided.counted.push_back(prepared.shares[i].keys.front());
      } else if (!combined.denial) {
        combined.verdict = Decision::Verdict::denied;
        combined.denial = part.denial;
      }
    } catch (const Error& e) {
      share_error = share_error.value_or(e);
    }
  }
  if (share_error && !share_error->is_input_error()) {
    // A share did not answer: the home record stays pending and the shares that ran keep what
    // they took; the same id again replays them and runs the rest.
    throw *share_error;
  }
  if (share_error || (!combined.allowed() && !combined.denial)) {
    // Nothing to decide on (a conflict, an overflow, a share voided long ago): give back what
    // moved and leave the home record pending.
    run_on_shares(decided.counted, {detail::void_share(Clock::now(), options_.replay_horizon,
                                                       home_fingerprint(prepared))});
    if (voided_share && !share_error) {
      // A share decided after the sweep abandoned the transaction (late, or resent after its
      // reply was lost) met the void: the home record has the answer, unless it is gone too.
      const Reply home = run_home(transaction.id, {"read"});
      if (reply_status(home) == ReplyStatus::final_) {
        decided.abandoned = replay_home(transaction, home);
        return decided;
      }
    }
    throw share_error.value_or(
        Error(errc::conflict,
              quoted_id(transaction.id) + " was voided before and its home record is gone",
              Outcome::failed));
  }
  combined.state = detail::decided_state(op, combined.allowed());
  return decided;
}

Decision LimitCounter::Impl::after_finish(const Transaction& transaction,
                                          const PreparedDecision& prepared,
                                          const SharesDecided& decided, const Reply& finished) {
  const ReplyStatus status = reply_status(finished);
  if (status == ReplyStatus::final_) {
    return replay_home(transaction, finished);
  }
  if (status != ReplyStatus::first) {
    throw Error(errc::protocol_error,
                "transaction_home finish of " + quoted_id(transaction.id) + ": unexpected reply " +
                    finished.debug_string(),
                Outcome::unknown);
  }
  if (!decided.combined.allowed()) {
    void_shares(transaction, home_fingerprint(prepared), decided.counted);
  }
  return decided.combined;
}

// The home record's decision again: its verdict and denial, and no rules (the home record keeps
// no counter's totals, and reading the shares' counters would cost a round trip per slot). A
// denied transaction's shares are voided once more: a void that an earlier caller could not
// finish is finished by any later one.
Decision LimitCounter::Impl::replay_home(const Transaction& transaction, const Reply& final_reply) {
  const TransactionState state = detail::transaction_state(
      final_reply.at(1).as_string(), "the home record of " + quoted_id(transaction.id));
  Decision decision = detail::decode_stored_decision(state, final_reply.at(2).as_string(),
                                                     transaction.id, transaction.amount);
  decision.replayed = true;
  if (!decision.allowed()) {
    void_shares(transaction, final_reply.at(4).as_string(),
                share_records(transaction.id, final_reply.at(3).as_string()));
  }
  return decision;
}

// A share record that says "voided" belongs to a transaction decided over several slots (under
// the rules of its first call): its home record has the decision.
Decision LimitCounter::Impl::replay_voided(const Transaction& transaction) {
  const Reply home = run_home(transaction.id, {"read"});
  if (reply_status(home) != ReplyStatus::final_) {
    throw Error(errc::conflict,
                quoted_id(transaction.id) + " was voided and its home record is " +
                    home.at(0).as_string() + ": retry it later",
                Outcome::failed);
  }
  return replay_home(transaction, home);
}

// Gives back what a denied transaction's shares took. The denial is final at the home record
// whatever happens here; a void that fails is thrown as Outcome::unknown, so that the host
// sends the id again, which replays the denial and finishes the voids (never an allow).
void LimitCounter::Impl::void_shares(const Transaction& transaction, const std::string& fingerprint,
                                     const std::vector<std::string>& shares) {
  try {
    run_on_shares(shares, {detail::void_share(Clock::now(), options_.replay_horizon, fingerprint)});
  } catch (const Error& e) {
    throw Error(static_cast<errc>(e.code().value()),
                quoted_id(transaction.id) + " is denied, but not every share gave back what it " +
                    "took yet (" + e.what() + "): send it again to finish",
                Outcome::unknown);
  }
}

} // namespace limitcounter
