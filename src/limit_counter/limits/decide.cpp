// LimitCounter's single decisions: consume, reserve and check of one transaction, sent alone
// or merged with concurrent consumes; the failure policies when Redis was not reached, the local
// fallback's reports, and the observer's.
#include "limit_counter/limit_counter_impl.hpp"

#include <limitcounter/detail/lua_scripts.hpp>

#include "limit_counter/codec/decide_arguments.hpp"
#include "limit_counter/codec/decide_replies.hpp"
#include "limit_counter/consume_coalescer.hpp"
#include "shared/amount.hpp"
#include "shared/coalescer.hpp"

namespace limitcounter {

Decision LimitCounter::Impl::consume(const Transaction& transaction) {
  return decide(LimitOp::consume, transaction);
}

Decision LimitCounter::Impl::reserve(const Transaction& transaction) {
  return decide(LimitOp::reserve, transaction);
}

Decision LimitCounter::Impl::check(const Transaction& transaction) {
  return decide(LimitOp::check, transaction);
}

Reply LimitCounter::Impl::run_limit(const std::vector<std::string>& keys,
                                    const std::vector<std::string>& args) {
  return redis_.eval(scripts::limit, keys, args, Resend::same_id);
}

Reply LimitCounter::Impl::run_consume(ScriptCall& call) {
  if (!coalescer_) {
    return run_limit(call.keys, call.args);
  }
  detail::ConsumeJob job;
  job.call = &call;
  coalescer_->run(job, [this](detail::ConsumeJob* const* jobs, std::size_t count) {
    detail::run_consume_jobs(redis_, jobs, count);
  });
  if (job.error) {
    throw *job.error;
  }
  return std::move(job.reply);
}

Decision LimitCounter::Impl::finish_decide(LimitOp op, const Transaction& transaction,
                                           const detail::DecideShape& shape,
                                           const Reply& reply) const {
  if (reply.is_error()) {
    throw Error(errc::server_error, reply.as_string(), Outcome::failed);
  }
  Decision decision = detail::decode_decision(reply, shape, transaction.id, transaction.amount);
  if (!decision.replayed && !decision.dry_run) {
    decision.state = !decision.allowed()      ? "denied"
                     : op == LimitOp::reserve ? "reserved"
                                              : "consumed";
  }
  return decision;
}

Decision LimitCounter::Impl::decide(LimitOp op, const Transaction& transaction) {
  const TimePoint started = Clock::now();
  try {
    Decision decision = decide_with_redis(op, transaction);
    report(op, transaction, decision, started);
    return decision;
  } catch (const Error& e) {
    if (options_.observer) {
      options_.observer->on_error(e);
    }
    throw;
  }
}

bool LimitCounter::Impl::policy_decides(const Error& error,
                                        const PreparedDecision& prepared) const {
  // Only a call that certainly did not run may be decided without Redis: one that may have
  // run is settled by sending the same id again, which replays what Redis decided.
  return !error.is_input_error() && error.outcome() == Outcome::not_sent &&
         prepared.on_failure != FailurePolicy::raise;
}

Decision LimitCounter::Impl::decide_with_redis(LimitOp op, const Transaction& transaction) {
  const auto in_force = rules_to_decide(op, transaction.id);
  PreparedDecision prepared =
      prepare_decide(op, transaction, in_force->rules, in_force->args.get(), Clock::now());
  if (prepared.cached) {
    prepared.cached->rule_set_version = in_force->version;
    return std::move(*prepared.cached);
  }
  std::optional<Decision> decision;
  Reply reply;
  try {
    if (!prepared.shares.empty() && op == LimitOp::consume && spread_coalescer_) {
      decision = consume_in_shares(transaction, prepared);
    } else if (!prepared.shares.empty()) {
      decision = decide_in_shares(op, transaction, prepared);
    } else if (op == LimitOp::consume) {
      reply = run_consume(prepared.call);
    } else {
      reply = run_limit(prepared.call.keys, prepared.call.args);
    }
  } catch (const Error& e) {
    learn(op, transaction, prepared, nullptr, &e);
    if (!policy_decides(e, prepared)) {
      throw;
    }
    if (options_.observer) {
      options_.observer->on_error(e);
    }
    decision = decide_without_redis(op, transaction, prepared);
    decision->rule_set_version = in_force->version;
    return std::move(*decision);
  }
  if (!decision) {
    decision = finish_one_slot(op, transaction, prepared.shapes.front(), reply);
  }
  decision->rule_set_version = in_force->version;
  learn(op, transaction, prepared, &*decision, nullptr);
  if (!local_->empty()) {
    report_local_usage();
  }
  return std::move(*decision);
}

// The decision of a call on one record; a replay that says "voided" is answered from the
// home record (see `replay_voided`).
Decision LimitCounter::Impl::finish_one_slot(LimitOp op, const Transaction& transaction,
                                             const detail::DecideShape& shape, const Reply& reply) {
  Decision decision = finish_decide(op, transaction, shape, reply);
  if (decision.replayed && decision.state == "voided") {
    return replay_voided(transaction);
  }
  return decision; // moved, where a conditional expression would copy it
}

// Redis could not be reached (nothing was sent): the strictest failure policy of the
// applicable rules decides, after the per-transaction rules, which need no counter.
Decision LimitCounter::Impl::decide_without_redis(LimitOp op, const Transaction& transaction,
                                                  const PreparedDecision& prepared) {
  Decision decision;
  decision.dry_run = op == LimitOp::check;
  if (prepared.single_denial) {
    decision.verdict = Decision::Verdict::denied;
    decision.state = "denied";
    decision.denial = prepared.single_denial;
    return decision;
  }
  decision.degraded = true;
  bool allowed = prepared.on_failure == FailurePolicy::allow;
  if (prepared.on_failure == FailurePolicy::local) {
    // A check only looks; consume and reserve take from this node's share.
    allowed = decision.dry_run
                  ? true
                  : local_->try_take(prepared.local_counters, transaction.amount, Clock::now());
  }
  if (allowed) {
    decision.state = op == LimitOp::reserve ? "reserved" : "consumed";
  } else {
    decision.verdict = Decision::Verdict::denied;
    decision.state = "denied";
    decision.denial = Denial{prepared.failure_rule, Metric::unavailable, 0, 0, transaction.amount};
  }
  return decision;
}

void LimitCounter::Impl::report_local_usage() {
  const auto reports = local_->reports(Clock::now());
  if (reports.empty()) {
    return;
  }
  std::vector<ScriptCall> calls;
  calls.reserve(reports.size());
  for (const auto& report : reports) {
    calls.push_back(
        {&scripts::local_report,
         {report.key, report.reports_key},
         {report.field, std::to_string(report.usage.count), std::to_string(report.usage.amount),
          std::to_string(detail::unix_millis(report.expire_at)), report.id}});
  }
  std::vector<Reply> replies;
  try {
    replies = redis_.eval_pipeline(calls);
  } catch (const Error&) {
    return; // sent again, under the same ids, with the next call that reaches Redis
  }
  std::vector<std::string> arrived;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    if (replies[i].is_error() || replies[i].at(0).as_string() == "overflow") {
      continue; // kept, and tried again with the next call
    }
    arrived.push_back(reports[i].id);
    if (options_.observer && replies[i].at(0).as_string() == "added") {
      options_.observer->on_local_usage_reported(reports[i].key, reports[i].field,
                                                 reports[i].usage);
    }
  }
  local_->reported(arrived);
}

void LimitCounter::Impl::report(LimitOp op, const Transaction& transaction,
                                const Decision& decision, TimePoint started) const {
  if (!options_.observer) {
    return;
  }
  options_.observer->on_decision(op, transaction, decision, Clock::now() - started);
  if (!decision.allowed()) {
    return;
  }
  for (const auto& rule : decision.rules) {
    const auto near = [&](std::optional<std::int64_t> limit, std::int64_t used) {
      return limit && *limit > 0 &&
             static_cast<double>(used) >=
                 options_.near_limit_fraction * static_cast<double>(*limit);
    };
    if (near(rule.max_count, rule.used.count) || near(rule.max_amount, rule.used.amount)) {
      options_.observer->on_near_limit(transaction, rule);
    }
  }
}

} // namespace limitcounter
