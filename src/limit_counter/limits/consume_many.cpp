// LimitCounter::consume_many: many consumes decided in one round trip (batch script calls on
// standalone Redis; every item's steps in one pipeline each on a Redis Cluster).
#include "limit_counter/codec/decide_batch.hpp"
#include "limit_counter/codec/decide_replies.hpp"
#include "limit_counter/limit_counter_impl.hpp"

#include <limitcounter/detail/lua_scripts.hpp>

#include "redis/operation_resends.hpp"
#include "shared/batch.hpp"

namespace limitcounter {
namespace {

// The replies of the batch calls, one per transaction, and (in `refusals`) the error of each
// transaction's batch call if that call did not run or lost its reply (`Redis::eval_pipeline`
// with refusals). A batch that failed as a whole (a script error) fails each of its
// transactions; the ones before the error may have been decided, so the outcome is unknown and
// the same ids replay it.
std::vector<Reply> batch_replies(const std::vector<Reply>& replies,
                                 const std::vector<std::optional<Error>>& refused_calls,
                                 std::size_t transactions,
                                 std::vector<std::optional<Error>>& refusals) {
  std::vector<Reply> flat;
  flat.reserve(transactions);
  refusals.clear();
  for (std::size_t call = 0; call < replies.size(); ++call) {
    const Reply& reply = replies[call];
    const std::size_t in_batch = std::min(detail::max_decide_batch, transactions - flat.size());
    refusals.insert(refusals.end(), in_batch, refused_calls[call]);
    if (reply.is_error()) {
      flat.insert(flat.end(), in_batch, reply);
      continue;
    }
    std::vector<Reply> own = detail::split_decide_replies(reply, in_batch);
    flat.insert(flat.end(), std::make_move_iterator(own.begin()),
                std::make_move_iterator(own.end()));
  }
  return flat;
}

} // namespace

// Decides like `consume`, item by item: the calls of one slot go in batch script calls of up to
// `max_decide_batch` transactions (each decided on its own), one pipeline; on a cluster, every
// item through its home record, each step of all items in one pipeline; a pipeline that was not
// sent lets each item's failure policy decide; the local fallback is reported as after a single
// call.
std::vector<BatchResult<Decision>>
LimitCounter::Impl::consume_many(const std::vector<Transaction>& transactions) {
  const TimePoint started = Clock::now();
  const detail::OperationResends resends(redis_); // (one budget for the batch and the steps)
  std::vector<PreparedDecision> prepared;
  prepared.reserve(transactions.size());
  std::vector<ScriptCall> batches;
  std::size_t in_batches = 0;
  std::shared_ptr<const RulesInForce> in_force;
  if (!transactions.empty()) {
    in_force = rules_to_decide(LimitOp::consume, transactions.front().id);
    detail::DecideBatch batch;
    const auto send = [&] {
      auto [keys, args] = batch.take();
      batches.push_back({&scripts::limit, std::move(keys), std::move(args), Resend::same_id});
    };
    for (const auto& transaction : transactions) {
      prepared.push_back(prepare_decide(LimitOp::consume, transaction, in_force->rules,
                                        in_force->args.get(), started));
      ScriptCall& call = prepared.back().call;
      if (prepared.back().shares.empty() && !prepared.back().cached) {
        batch.add(std::move(call.keys), std::move(call.args));
        ++in_batches;
        if (batch.size() == detail::max_decide_batch) {
          send();
        }
      }
    }
    if (batch.size() > 0) {
      send();
    }
  }
  std::vector<Reply> replies;
  std::vector<std::optional<Error>> refusals; // per transaction: its call's, as eval's
  std::optional<Error> pipeline_error;
  try {
    if (!batches.empty()) {
      std::vector<std::optional<Error>> refused_calls;
      replies = batch_replies(redis_.eval_pipeline(batches, refused_calls), refused_calls,
                              in_batches, refusals);
    }
  } catch (const Error& e) {
    pipeline_error = e;
  }
  // On a cluster: every transaction through its home record, all of them step by step.
  std::vector<const Transaction*> spread;
  std::vector<const PreparedDecision*> spread_prepared;
  for (std::size_t i = 0; i < transactions.size(); ++i) {
    if (!prepared[i].shares.empty() && !prepared[i].cached) {
      spread.push_back(&transactions[i]);
      spread_prepared.push_back(&prepared[i]);
    }
  }
  std::vector<BatchResult<Decision>> in_shares =
      spread.empty() ? std::vector<BatchResult<Decision>>{}
                     : decide_many_in_shares(LimitOp::consume, spread, spread_prepared);
  std::size_t next_in_shares = 0;
  std::vector<BatchResult<Decision>> results;
  results.reserve(transactions.size());
  std::size_t next_reply = 0;
  bool reached_redis = !pipeline_error && !batches.empty();
  for (std::size_t i = 0; i < transactions.size(); ++i) {
    const Transaction& transaction = transactions[i];
    if (prepared[i].cached) {
      prepared[i].cached->rule_set_version = in_force->version;
      report(LimitOp::consume, transaction, *prepared[i].cached, started);
      results.emplace_back(std::move(*prepared[i].cached));
      continue;
    }
    try {
      const bool one_slot = prepared[i].shares.empty();
      const std::size_t call = one_slot ? next_reply++ : 0;
      std::optional<Decision> decision;
      bool by_redis = true;
      try {
        if (!one_slot) {
          decision = detail::value_or_throw(std::move(in_shares.at(next_in_shares++)));
          reached_redis = true;
        } else if (pipeline_error) {
          throw *pipeline_error;
        } else if (refusals.at(call)) {
          throw *refusals.at(call); // (not sent: the failure policy may decide; lost: unknown)
        } else if (replies.at(call).is_error()) {
          throw Error(errc::server_error, replies.at(call).as_string(), Outcome::unknown);
        }
      } catch (const Error& e) {
        learn(LimitOp::consume, transaction, prepared[i], nullptr, &e);
        if (!policy_decides(e, prepared[i])) {
          throw;
        }
        by_redis = false;
        decision = decide_without_redis(LimitOp::consume, transaction, prepared[i]);
      }
      if (!decision) {
        decision = finish_one_slot(LimitOp::consume, transaction, prepared[i].shapes.front(),
                                   replies.at(call));
      }
      decision->rule_set_version = in_force->version;
      if (by_redis) {
        learn(LimitOp::consume, transaction, prepared[i], &*decision, nullptr);
      }
      report(LimitOp::consume, transaction, *decision, started);
      results.emplace_back(std::move(*decision));
    } catch (const Error& e) {
      if (options_.observer) {
        options_.observer->on_error(e);
      }
      results.emplace_back(e);
    }
  }
  if (reached_redis && !local_->empty()) {
    report_local_usage();
  }
  return results;
}

} // namespace limitcounter
