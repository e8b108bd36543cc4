// The remote decider: what Redis decides for prepared decisions, and nothing local (the cache,
// the failure policies and the local fallback are decide.cpp's layers around it). One-slot
// items are script calls of lua/limit.lua; items spread over cluster slots go through their
// home records (cluster/decide_in_shares.cpp). A lone consume is merged with concurrent ones.
#include "limit_counter/limit_counter_impl.hpp"

#include <algorithm>

#include <limitcounter/detail/lua_scripts.hpp>

#include "limit_counter/codec/decide_arguments.hpp"
#include "limit_counter/codec/decide_batch.hpp"
#include "limit_counter/codec/decide_replies.hpp"
#include "redis/operation_resends.hpp"
#include "shared/coalescer.hpp"

namespace limitcounter {
namespace {

// `error` as a call that may have run: retried with its id, which replays what Redis decided.
Error may_have_run(const Error& error) {
  return Error(static_cast<errc>(error.code().value()), error.what(), Outcome::unknown);
}

// The error of a call that held `transactions` transactions: when it held several and failed
// part way (an error reply), the ones before the failing one were decided, so no caller may
// hear "changed nothing".
Error shared_error(const Error& error, std::size_t transactions) {
  return transactions > 1 && error.outcome() == Outcome::failed ? may_have_run(error) : error;
}

// Each of `count` items (LimitCounter::Impl::DecideItem) whose call ended with `error`, one
// call for all of them.
template <typename Item>
void fail_items(Item* const* items, std::size_t count, const Error& error) {
  for (std::size_t i = 0; i < count; ++i) {
    items[i]->error = shared_error(error, count);
  }
}

} // namespace

void LimitCounter::Impl::finish_items(LimitOp op, DecideItem* const* items, const Reply* replies,
                                      std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    DecideItem& item = *items[i];
    try {
      item.decision =
          finish_one_slot(op, *item.transaction, item.prepared.shapes.front(), replies[i]);
    } catch (const Error& e) {
      // The call ran: an error reading its answer (a replay's home record not reached, say)
      // is never "not sent", so no failure policy decides in Redis's place.
      item.error = e.outcome() == Outcome::not_sent ? may_have_run(e) : e;
    } catch (const std::exception& e) {
      // (on the thread that runs a merged batch: the other callers' items still get theirs)
      item.error = Error(errc::protocol_error,
                         std::string("reading the decision failed: ") + e.what(), Outcome::unknown);
    }
  }
}

void LimitCounter::Impl::decide_remotely_merged(DecideItem& item) {
  coalescer_->run(item, [this](DecideItem* const* items, std::size_t count) {
    decide_remotely(LimitOp::consume, items, count);
  });
}

void LimitCounter::Impl::decide_remotely(LimitOp op, DecideItem* const* items, std::size_t count) {
  if (count == 1 && items[0]->prepared.shares.empty()) {
    // A lone call: no pipeline to build; a consume's in the fewest arguments (op one).
    ScriptCall& call = items[0]->prepared.call;
    if (op == LimitOp::consume) {
      call.args = detail::lone_consume_args(std::move(call.args));
    }
    Reply reply;
    try {
      reply = redis_.eval(*call.script, call.keys, call.args, Resend::same_id);
    } catch (const Error& e) {
      fail_items(items, 1, e);
      return;
    }
    finish_items(op, items, &reply, 1);
    return;
  }
  const auto is_spread = [](const DecideItem* item) { return !item->prepared.shares.empty(); };
  if (std::none_of(items, items + count, is_spread)) {
    decide_in_one_slot(op, items, count);
    return;
  }
  std::vector<DecideItem*> one_slot;
  std::vector<DecideItem*> spread;
  for (std::size_t i = 0; i < count; ++i) {
    (is_spread(items[i]) ? spread : one_slot).push_back(items[i]);
  }
  const detail::OperationResends resends(redis_); // (one budget for all the calls and steps)
  decide_in_one_slot(op, one_slot.data(), one_slot.size());
  decide_in_shares(op, spread);
}

void LimitCounter::Impl::decide_in_one_batch_call(DecideItem* const* items, std::size_t count) {
  detail::DecideBatch batch;
  for (std::size_t i = 0; i < count; ++i) {
    ScriptCall& call = items[i]->prepared.call;
    batch.add(std::move(call.keys), std::move(call.args));
  }
  const auto [keys, args] = batch.take();
  std::vector<Reply> replies;
  try {
    replies = detail::split_decide_replies(redis_.eval(scripts::limit, keys, args, Resend::same_id),
                                           count);
  } catch (const Error& e) {
    fail_items(items, count, e);
    return;
  }
  finish_items(LimitOp::consume, items, replies.data(), count);
}

void LimitCounter::Impl::decide_in_one_slot(LimitOp op, DecideItem* const* items,
                                            std::size_t count) {
  // Consumes on standalone Redis share batch calls (each transaction decided on its own);
  // on a cluster each record is in a slot of its own, so each item is a call of its own.
  const bool batched = op == LimitOp::consume && !redis_.is_cluster() && count > 1;
  if (batched && count <= detail::max_decide_batch) {
    decide_in_one_batch_call(items, count); // (merged consumes: no pipeline to build)
    return;
  }
  if (count == 0) {
    return;
  }
  std::vector<ScriptCall> calls;
  std::vector<std::size_t> first_of_call; // the index in `items` of each call's first item
  detail::DecideBatch batch;
  const auto send_batch = [&] {
    auto [keys, args] = batch.take();
    calls.push_back({&scripts::limit, std::move(keys), std::move(args), Resend::same_id});
  };
  for (std::size_t i = 0; i < count; ++i) {
    ScriptCall& call = items[i]->prepared.call;
    if (!batched) {
      first_of_call.push_back(i);
      calls.push_back({call.script, std::move(call.keys), std::move(call.args), Resend::same_id});
      continue;
    }
    if (batch.size() == 0) {
      first_of_call.push_back(i);
    }
    batch.add(std::move(call.keys), std::move(call.args));
    if (batch.size() == detail::max_decide_batch) {
      send_batch();
    }
  }
  if (batch.size() > 0) {
    send_batch();
  }
  std::vector<std::optional<Error>> refusals; // per call: `eval`'s error of one not run or lost
  std::vector<Reply> replies;
  std::optional<Error> pipeline_error;
  try {
    replies = redis_.eval_pipeline(calls, refusals);
  } catch (const Error& e) {
    pipeline_error = e;
  }
  for (std::size_t c = 0; c < calls.size(); ++c) {
    const std::size_t first = first_of_call[c];
    const std::size_t in_call = (c + 1 < calls.size() ? first_of_call[c + 1] : count) - first;
    try {
      if (pipeline_error) {
        throw *pipeline_error; // (no call ran, or every reply was lost)
      }
      if (refusals[c]) {
        throw *refusals[c]; // (not sent: the failure policy may decide; lost or failed: unknown)
      }
      if (replies[c].is_error()) {
        throw Error(errc::server_error, "script limit: " + replies[c].as_string(), Outcome::failed);
      }
      std::vector<Reply> own;
      if (batched) {
        own = detail::split_decide_replies(replies[c], in_call);
      } else {
        own.push_back(std::move(replies[c]));
      }
      finish_items(op, items + first, own.data(), in_call);
    } catch (const Error& e) {
      fail_items(items + first, in_call, e);
    }
  }
}

// The decision of a call on one record; a replay that says "voided" is answered from the
// home record (see `replay_voided`).
Decision LimitCounter::Impl::finish_one_slot(LimitOp op, const Transaction& transaction,
                                             const detail::DecideShape& shape, const Reply& reply) {
  Decision decision = finish_decide(op, transaction, shape, reply);
  if (decision.replayed && decision.state == TransactionState::voided) {
    return replay_voided(transaction);
  }
  return decision; // moved, where a conditional expression would copy it
}

} // namespace limitcounter
