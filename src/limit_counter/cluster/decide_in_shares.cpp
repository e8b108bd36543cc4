// LimitCounter on a Redis Cluster: one or many transactions decided in three steps, each step
// of all of them in one pipeline: begin at each home record, the shares, finish at each home
// record (what each step's reply decides: decide_steps.cpp). A check runs its shares only.
#include "limit_counter/limit_counter_impl.hpp"

#include <algorithm>

#include <limitcounter/detail/lua_scripts.hpp>

#include "limit_counter/cluster/share_pipeline.hpp"
#include "limit_counter/codec/common.hpp"
#include "limit_counter/codec/decide_arguments.hpp"
#include "limit_counter/codec/record_text.hpp"
#include "limit_counter/share_plan.hpp"
#include "redis/operation_resends.hpp"
#include "shared/batch.hpp"

namespace limitcounter {

using detail::quoted_id;

// A peek spread over several slots writes nothing: its shares run side by side and the
// strictest answer is the decision.
Decision LimitCounter::Impl::check_in_shares(const Transaction& transaction,
                                             const PreparedDecision& prepared) {
  const std::vector<Reply> replies = redis_.eval_pipeline(prepared.shares);
  Decision combined;
  combined.dry_run = true;
  for (std::size_t i = 0; i < replies.size(); ++i) {
    Decision part = finish_decide(LimitOp::check, transaction, prepared.shapes[i], replies[i]);
    combined.rules.insert(combined.rules.end(), part.rules.begin(), part.rules.end());
    if (!part.allowed() && !combined.denial) {
      combined.verdict = part.verdict;
      combined.denial = part.denial;
    }
  }
  return combined;
}

namespace {

// A home record's reply as `Redis::eval` would have it: an error reply thrown.
const Reply& home_reply(const Reply& reply) {
  if (reply.is_error()) {
    throw Error(errc::server_error, "script transaction_home: " + reply.as_string(),
                Outcome::failed);
  }
  return reply;
}

// An error after the home record was begun: some shares may have run, so only the same id
// settles it (a bad input, or an outcome already unknown, says so itself).
Error half_decided(const Error& error, const std::string& transaction_id) {
  if (error.is_input_error() || error.outcome() == Outcome::unknown) {
    return error;
  }
  return Error(static_cast<errc>(error.code().value()),
               std::string(error.what()) + "; " + quoted_id(transaction_id) +
                   " may be half decided: retry it with the same id",
               Outcome::unknown);
}

} // namespace

void LimitCounter::Impl::decide_in_shares(LimitOp op, const std::vector<DecideItem*>& items) {
  if (op == LimitOp::check) {
    for (DecideItem* item : items) {
      try {
        item->decision = check_in_shares(*item->transaction, item->prepared);
      } catch (const Error& e) {
        item->error = e;
      }
    }
    return;
  }
  std::vector<const Transaction*> transactions;
  std::vector<const PreparedDecision*> prepared;
  transactions.reserve(items.size());
  prepared.reserve(items.size());
  for (const DecideItem* item : items) {
    transactions.push_back(item->transaction);
    prepared.push_back(&item->prepared);
  }
  try {
    std::vector<BatchResult<Decision>> results = decide_many_in_shares(op, transactions, prepared);
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (auto* error = std::get_if<Error>(&results[i])) {
        items[i]->error = std::move(*error);
      } else {
        items[i]->decision = std::move(std::get<Decision>(results[i]));
      }
    }
  } catch (const Error& e) { // (not one transaction's: any of them may have run)
    for (DecideItem* item : items) {
      item->error = half_decided(e, item->transaction->id);
    }
  }
}

// Several transactions cost three round trips in all, not three each: a step's calls of every
// transaction go in one pipeline (one per node), and a transaction takes the next step only
// once its own previous step answered; the consumes' shares of one slot go in batch calls of
// lua/limit.lua (each transaction decided on its own, as consume_many's on standalone). Each
// transaction takes the steps it would take alone and fails on its own, except where it shares
// a call: a lost reply of a node's pipeline, or an error reply of a batch call, is every
// transaction's in it (Outcome::unknown; the other nodes' calls go on). As for concurrent callers,
// a transaction's shares may see what another transaction's shares took in other slots before that
// one was denied and gave it back: the voids come with the finishes.
std::vector<BatchResult<Decision>>
LimitCounter::Impl::decide_many_in_shares(LimitOp op,
                                          const std::vector<const Transaction*>& transactions,
                                          const std::vector<const PreparedDecision*>& prepared) {
  const detail::OperationResends resends(redis_); // (one budget for all the steps)
  const std::size_t n = transactions.size();
  std::vector<std::optional<BatchResult<Decision>>> results(n);
  const auto half = [&](const Error& e, std::size_t i) {
    return half_decided(e, transactions[i]->id);
  };
  // One home record call per transaction of `of`: `step` reads its reply; an error of the step,
  // or of the pipeline as a whole, is that transaction's result (through `wrap`). Returns the
  // transactions whose step gave no result.
  const auto at_homes = [&](const std::vector<std::size_t>& of, auto&& args_of, auto&& step,
                            auto&& wrap) {
    std::vector<std::size_t> going_on;
    if (of.empty()) {
      return going_on;
    }
    std::vector<ScriptCall> calls;
    calls.reserve(of.size());
    for (const std::size_t i : of) {
      calls.push_back({&scripts::transaction_home,
                       {keys_.transaction(transactions[i]->id)},
                       args_of(i),
                       Resend::same_id});
    }
    std::vector<Reply> replies;
    std::vector<std::optional<Error>> refusals;
    try {
      replies = redis_.eval_pipeline(calls, refusals);
    } catch (const Error& e) {
      for (const std::size_t i : of) {
        results[i] = wrap(e, i);
      }
      return going_on;
    }
    for (std::size_t k = 0; k < of.size(); ++k) {
      if (refusals[k]) { // (not sent: at a begin, the failure policy may decide, as alone)
        results[of[k]] = wrap(*refusals[k], of[k]);
        continue;
      }
      try {
        if (std::optional<Decision> decision = step(of[k], home_reply(replies[k]))) {
          results[of[k]] = std::move(*decision);
        } else {
          going_on.push_back(of[k]);
        }
      } catch (const Error& e) {
        results[of[k]] = wrap(e, of[k]);
      }
    }
    return going_on;
  };

  // 1. Begin at each home record. The home record compares one value: the shares'
  // fingerprint and the amount together; it lives `share_record_margin` less than the longest
  // lived of its shares' records, each by its own master's clock (so a home outlives no share
  // while the masters' clocks are within that margin, whatever the client's clock).
  std::vector<std::size_t> all(n);
  for (std::size_t i = 0; i < n; ++i) {
    all[i] = i;
  }
  const std::vector<std::size_t> begun = at_homes(
      all,
      [&](std::size_t i) {
        std::int64_t longest = 0;
        for (const ScriptCall& share : prepared[i]->shares) {
          longest = std::max(longest, detail::decide_record_lifetime(share.args));
        }
        const auto margin = std::chrono::milliseconds(detail::share_record_margin).count();
        std::vector<std::string> args{"begin", home_fingerprint(*prepared[i]),
                                      detail::joined_lines(prepared[i]->share_tags),
                                      std::to_string(longest - margin)};
        if (op == LimitOp::reserve) {
          args.push_back(prepared[i]->home_hold_expiry); // (kept from the first begin)
        }
        return args;
      },
      [&](std::size_t i, const Reply& begun_reply) {
        return after_begin(*transactions[i], *prepared[i], begun_reply);
      },
      [](const Error& e, std::size_t) { return e; });

  // 2. Each begun transaction's shares.
  std::vector<const std::vector<ScriptCall>*> shares_of;
  shares_of.reserve(begun.size());
  for (const std::size_t i : begun) {
    shares_of.push_back(&prepared[i]->shares);
  }
  std::vector<BatchResult<std::vector<Reply>>> share_replies =
      detail::run_shares(redis_, op == LimitOp::consume, shares_of);
  std::vector<std::optional<SharesDecided>> decided(n);
  std::vector<std::size_t> deciding;
  for (std::size_t k = 0; k < begun.size(); ++k) {
    const std::size_t i = begun[k];
    try {
      decided[i] = after_shares(op, *transactions[i], *prepared[i],
                                detail::value_or_throw(std::move(share_replies[k])));
      if (decided[i]->abandoned) {
        results[i] = std::move(*decided[i]->abandoned);
      } else {
        deciding.push_back(i);
      }
    } catch (const Error& e) {
      results[i] = half(e, i);
    }
  }

  // 3. Finish at each home record: its compare-and-set makes the decision final.
  at_homes(
      deciding,
      [&](std::size_t i) {
        const Decision& combined = decided[i]->combined;
        return std::vector<std::string>{"finish",
                                        home_fingerprint(*prepared[i]),
                                        std::string(to_string(combined.state)),
                                        detail::encode_stored_decision(combined),
                                        prepared[i]->home_hold_expiry,
                                        decided[i]->replayed_share ? "1" : "0"};
      },
      [&](std::size_t i, const Reply& finished) -> std::optional<Decision> {
        return after_finish(*transactions[i], *prepared[i], *decided[i], finished);
      },
      half);

  std::vector<BatchResult<Decision>> out;
  out.reserve(n);
  for (auto& result : results) {
    out.push_back(std::move(*result));
  }
  return out;
}

} // namespace limitcounter
