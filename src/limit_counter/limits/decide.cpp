// LimitCounter's decisions, one path for all: consume, reserve and check of one transaction and
// consume_many, as the local layers around the remote decider (remote_decider.cpp): the
// exhausted cache's decisions, the failure policies when Redis was not reached, the cache's
// learning, the observer's reports and the local fallback's.
#include "limit_counter/limit_counter_impl.hpp"

#include <limitcounter/detail/lua_scripts.hpp>

#include "limit_counter/codec/decide_replies.hpp"
#include "shared/amount.hpp"

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

Decision LimitCounter::Impl::finish_decide(LimitOp op, const Transaction& transaction,
                                           const detail::DecideShape& shape,
                                           const Reply& reply) const {
  if (reply.is_error()) {
    throw Error(errc::server_error, reply.as_string(), Outcome::failed);
  }
  Decision decision = detail::decode_decision(reply, shape, transaction.id, transaction.amount);
  if (!decision.replayed) {
    decision.state = detail::decided_state(op, decision.allowed());
  }
  return decision;
}

Decision LimitCounter::Impl::decide(LimitOp op, const Transaction& transaction) {
  const TimePoint started = Clock::now();
  try {
    const auto in_force = rules_to_decide(op, transaction.id);
    DecideItem item{
        &transaction,
        prepare_decide(op, transaction, in_force->rules, in_force->args.get(), Clock::now()),
        std::nullopt, std::nullopt};
    DecideItem* const one[] = {&item};
    decide_items(op, one, 1, in_force->version, started);
    if (item.error) {
      throw *item.error;
    }
    return std::move(*item.decision);
  } catch (const Error& e) {
    if (options_.observer) {
      options_.observer->on_error(e);
    }
    throw;
  }
}

// Decides like `consume`, item by item, in one round trip on standalone Redis, three on a cluster
// (see `decide_remotely`). Bad input anywhere throws before anything is sent.
std::vector<BatchResult<Decision>>
LimitCounter::Impl::consume_many(const std::vector<Transaction>& transactions) {
  if (transactions.empty()) {
    return {};
  }
  const TimePoint started = Clock::now();
  const auto in_force = rules_to_decide(LimitOp::consume, transactions.front().id);
  std::vector<DecideItem> items;
  items.reserve(transactions.size());
  std::vector<DecideItem*> pointers;
  pointers.reserve(transactions.size());
  for (const auto& transaction : transactions) {
    items.push_back({&transaction,
                     prepare_decide(LimitOp::consume, transaction, in_force->rules,
                                    in_force->args.get(), started),
                     std::nullopt, std::nullopt});
    pointers.push_back(&items.back());
  }
  decide_items(LimitOp::consume, pointers.data(), pointers.size(), in_force->version, started);
  std::vector<BatchResult<Decision>> results;
  results.reserve(items.size());
  for (DecideItem& item : items) {
    if (item.error) {
      if (options_.observer) {
        options_.observer->on_error(*item.error);
      }
      results.emplace_back(std::move(*item.error));
    } else {
      results.emplace_back(std::move(*item.decision));
    }
  }
  return results;
}

void LimitCounter::Impl::decide_items(LimitOp op, DecideItem* const* items, std::size_t count,
                                      std::uint64_t version, TimePoint started) {
  if (count == 1 && !items[0]->prepared.cached) {
    if (op == LimitOp::consume && coalescer_) {
      decide_remotely_merged(*items[0]);
    } else {
      decide_remotely(op, items, 1);
    }
  } else if (count > 1) {
    std::vector<DecideItem*> remote;
    remote.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
      if (!items[i]->prepared.cached) {
        remote.push_back(items[i]);
      }
    }
    decide_remotely(op, remote.data(), remote.size());
  }
  bool decided_by_redis = false;
  for (std::size_t i = 0; i < count; ++i) {
    DecideItem& item = *items[i];
    const Transaction& transaction = *item.transaction;
    if (item.prepared.cached) {
      item.decision = std::move(item.prepared.cached);
    } else if (item.error) {
      learn(op, transaction, item.prepared, nullptr, &*item.error);
      if (!policy_decides(*item.error, item.prepared)) {
        continue;
      }
      if (options_.observer) {
        options_.observer->on_error(*item.error);
      }
      item.decision = decide_without_redis(op, transaction, item.prepared);
      item.error.reset();
    } else {
      learn(op, transaction, item.prepared, &*item.decision, nullptr);
      decided_by_redis = true;
    }
    item.decision->rule_set_version = version;
  }
  if (decided_by_redis && !local_->empty()) {
    report_local_usage();
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (items[i]->decision) {
      report(op, *items[i]->transaction, *items[i]->decision, started);
    }
  }
}

bool LimitCounter::Impl::policy_decides(const Error& error,
                                        const PreparedDecision& prepared) const {
  // Only a call that certainly did not run may be decided without Redis: one that may have
  // run is settled by sending the same id again, which replays what Redis decided.
  return !error.is_input_error() && error.outcome() == Outcome::not_sent &&
         prepared.on_failure != FailurePolicy::raise;
}

// Redis could not be reached (nothing was sent): the strictest failure policy of the
// applicable rules decides, after the per-transaction rules, which need no counter.
Decision LimitCounter::Impl::decide_without_redis(LimitOp op, const Transaction& transaction,
                                                  const PreparedDecision& prepared) {
  Decision decision;
  decision.dry_run = op == LimitOp::check;
  if (prepared.single_denial) {
    decision.verdict = Decision::Verdict::denied;
    decision.state = detail::decided_state(op, false);
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
  decision.state = detail::decided_state(op, allowed);
  if (!allowed) {
    decision.verdict = Decision::Verdict::denied;
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
