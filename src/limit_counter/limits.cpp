// LimitCounter's limits: consume, reserve, check, confirm, cancel, refund.
#include <limitcounter/limit_counter.hpp>

#include <limitcounter/detail/lua_scripts.hpp>

#include "limit_counter/consume_coalescer.hpp"
#include "limit_counter/exhausted_cache.hpp"
#include "limit_counter/limit_codec.hpp"
#include "limit_counter/local_ledger.hpp"
#include "limit_counter/rule_matching.hpp"
#include "limit_counter/share_plan.hpp"
#include "redis/operation_resends.hpp"
#include "shared/amount.hpp"
#include "shared/batch.hpp"
#include "shared/observed.hpp"

namespace limitcounter {
namespace {

using detail::quoted_id;

[[noreturn]] void throw_unexpected(const Reply& reply, const std::string& what) {
  throw Error(errc::protocol_error, what + ": unexpected reply " + reply.debug_string(),
              Outcome::unknown);
}

// A reversal that brought an original transaction its record was not decided for.
void throw_if_mismatch(const Reply& reply, std::string_view op, const std::string& id) {
  if (reply.at(0).as_string() == "mismatch") {
    throw Error(errc::conflict,
                std::string(op) + ": the transaction given is not the one " + quoted_id(id) +
                    " recorded (another operation, amount or attributes); nothing changed",
                Outcome::failed);
  }
}

// The observer's status words (see `LimitObserver::on_transition`).
std::string_view status_word(const ConfirmResult& result) {
  return result.replayed ? "replayed" : "confirmed";
}

std::string_view status_word(const CancelResult& result) {
  if (result.replayed) {
    return "replayed";
  }
  switch (result.status) {
  case CancelResult::Status::cancelled: return "cancelled";
  case CancelResult::Status::expired: return "expired";
  case CancelResult::Status::recorded_unknown: return "recorded_unknown";
  }
  return "other";
}

std::string_view status_word(const RefundResult& result) {
  return result.replayed ? "replayed" : "refunded";
}

// `run()`, reported to `observer` (if any) as one `op` transition.
template <typename Run> auto observed(LimitObserver* observer, LimitOp op, Run&& run) {
  return detail::observed_call(
      observer, std::forward<Run>(run), [observer, op](const auto* result, auto latency) {
        observer->on_transition(op, result ? status_word(*result) : "error", latency);
      });
}

} // namespace

void LimitCounter::set_rules(RuleSet rules) { set_rules(std::move(rules), 0); }

void LimitCounter::set_rules(RuleSet rules, std::uint64_t version) {
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

std::shared_ptr<const RuleSet> LimitCounter::rules() const {
  const std::lock_guard<std::mutex> lock(rules_mutex_);
  // (aliasing: the set keeps its RulesInForce alive)
  return rules_ ? std::shared_ptr<const RuleSet>(rules_, &rules_->rules)
                : std::make_shared<const RuleSet>();
}

std::uint64_t LimitCounter::rule_set_version() const {
  const std::lock_guard<std::mutex> lock(rules_mutex_);
  return rules_ ? rules_->version : 0;
}

std::shared_ptr<const LimitCounter::RulesInForce>
LimitCounter::rules_to_decide(std::string_view op, const std::string& id) const {
  const std::lock_guard<std::mutex> lock(rules_mutex_);
  if (!rules_) {
    // Deciding against no rules at all is a deployment mistake far more often than intent:
    // it would allow everything and record it.
    throw Error(errc::invalid_argument,
                std::string(op) + " of " + quoted_id(id) +
                    ": no rules were set (call set_rules; set_rules(RuleSet{}) allows every "
                    "transaction explicitly)");
  }
  return rules_;
}

Decision LimitCounter::consume(const Transaction& transaction) {
  return decide("consume", transaction);
}

Decision LimitCounter::reserve(const Transaction& transaction) {
  return decide("reserve", transaction);
}

Decision LimitCounter::check(const Transaction& transaction) {
  return decide("check", transaction);
}

Reply LimitCounter::run_limit(const std::vector<std::string>& keys,
                              const std::vector<std::string>& args) {
  return redis_.eval(scripts::limit, keys, args, Resend::same_id);
}

Reply LimitCounter::run_consume(ScriptCall& call) {
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

LimitCounter::PreparedDecision LimitCounter::prepare_decide(std::string_view op,
                                                            const Transaction& transaction,
                                                            const RuleSet& rules,
                                                            const detail::RuleSetArgs* rule_args,
                                                            TimePoint now) const {
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
          {&scripts::limit, std::move(call.keys), std::move(call.args), Resend::same_id});
      prepared.shapes.push_back(std::move(call.shape));
      prepared.share_tags.push_back(tag);
    }
    return prepared;
  }
  auto call =
      detail::build_decide(op, transaction, matched.per_transaction, matched.window, context);
  prepared.call = {&scripts::limit, std::move(call.keys), std::move(call.args)};
  prepared.shapes.push_back(std::move(call.shape));
  return prepared;
}

std::chrono::milliseconds LimitCounter::share_hold_grace() const {
  // Covers the confirm's fan-out after the home record took it (a few command timeouts at
  // most, retries included) and the clocks of the callers that release expired holds.
  if (!redis_.is_cluster()) {
    return std::chrono::milliseconds{0};
  }
  return options_.cluster_hold_grace.value_or(std::max<std::chrono::milliseconds>(
      std::chrono::seconds{30}, redis_.options().command_timeout * 10));
}

Decision LimitCounter::finish_decide(std::string_view op, const Transaction& transaction,
                                     const detail::DecideShape& shape, const Reply& reply) const {
  if (reply.is_error()) {
    throw Error(errc::server_error, reply.as_string(), Outcome::failed);
  }
  Decision decision = detail::decode_decision(reply, shape, transaction.id, transaction.amount);
  if (!decision.replayed && !decision.dry_run) {
    decision.state = !decision.allowed() ? "denied" : op == "reserve" ? "reserved" : "consumed";
  }
  return decision;
}

Decision LimitCounter::decide(std::string_view op, const Transaction& transaction) {
  const TimePoint started = Clock::now();
  try {
    Decision decision = decide_with_redis(op, transaction);
    report(op == "check"     ? LimitOp::check
           : op == "reserve" ? LimitOp::reserve
                             : LimitOp::consume,
           transaction, decision, started);
    return decision;
  } catch (const Error& e) {
    if (options_.observer) {
      options_.observer->on_error(e);
    }
    throw;
  }
}

bool LimitCounter::policy_decides(const Error& error, const PreparedDecision& prepared) const {
  // Only a call that certainly did not run may be decided without Redis: one that may have
  // run is settled by sending the same id again, which replays what Redis decided.
  return !error.is_input_error() && error.outcome() == Outcome::not_sent &&
         prepared.on_failure != FailurePolicy::raise;
}

Decision LimitCounter::decide_with_redis(std::string_view op, const Transaction& transaction) {
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
    if (!prepared.shares.empty() && op == "consume" && spread_coalescer_) {
      decision = consume_in_shares(transaction, prepared);
    } else if (!prepared.shares.empty()) {
      decision = decide_in_shares(op, transaction, prepared);
    } else if (op == "consume") {
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
Decision LimitCounter::finish_one_slot(std::string_view op, const Transaction& transaction,
                                       const detail::DecideShape& shape, const Reply& reply) {
  Decision decision = finish_decide(op, transaction, shape, reply);
  if (decision.replayed && decision.state == "voided") {
    return replay_voided(transaction);
  }
  return decision; // moved, where a conditional expression would copy it
}

// Redis could not be reached (nothing was sent): the strictest failure policy of the
// applicable rules decides, after the per-transaction rules, which need no counter.
Decision LimitCounter::decide_without_redis(std::string_view op, const Transaction& transaction,
                                            const PreparedDecision& prepared) {
  Decision decision;
  decision.dry_run = op == "check";
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
    decision.state = op == "reserve" ? "reserved" : "consumed";
  } else {
    decision.verdict = Decision::Verdict::denied;
    decision.state = "denied";
    decision.denial = Denial{prepared.failure_rule, Metric::unavailable, 0, 0, transaction.amount};
  }
  return decision;
}

void LimitCounter::report_local_usage() {
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

void LimitCounter::report(LimitOp op, const Transaction& transaction, const Decision& decision,
                          TimePoint started) const {
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
LimitCounter::consume_many(const std::vector<Transaction>& transactions) {
  const TimePoint started = Clock::now();
  const detail::OperationResends resends(redis_); // (one budget for the batch and the steps)
  std::vector<PreparedDecision> prepared;
  prepared.reserve(transactions.size());
  std::vector<ScriptCall> batches;
  std::size_t in_batches = 0;
  std::shared_ptr<const RulesInForce> in_force;
  if (!transactions.empty()) {
    in_force = rules_to_decide("consume", transactions.front().id);
    detail::DecideBatch batch;
    const auto send = [&] {
      auto [keys, args] = batch.take();
      batches.push_back({&scripts::limit, std::move(keys), std::move(args), Resend::same_id});
    };
    for (const auto& transaction : transactions) {
      prepared.push_back(
          prepare_decide("consume", transaction, in_force->rules, in_force->args.get(), started));
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
                     : decide_many_in_shares("consume", spread, spread_prepared);
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
        learn("consume", transaction, prepared[i], nullptr, &e);
        if (!policy_decides(e, prepared[i])) {
          throw;
        }
        by_redis = false;
        decision = decide_without_redis("consume", transaction, prepared[i]);
      }
      if (!decision) {
        decision =
            finish_one_slot("consume", transaction, prepared[i].shapes.front(), replies.at(call));
      }
      decision->rule_set_version = in_force->version;
      if (by_redis) {
        learn("consume", transaction, prepared[i], &*decision, nullptr);
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

ConfirmResult LimitCounter::confirm(const std::string& transaction_id,
                                    std::optional<std::int64_t> final_amount) {
  return observed(options_.observer.get(), LimitOp::confirm,
                  [&] { return run_confirm(transaction_id, final_amount, nullptr); });
}

ConfirmResult LimitCounter::confirm(const Transaction& original,
                                    std::optional<std::int64_t> final_amount) {
  return observed(options_.observer.get(), LimitOp::confirm,
                  [&] { return run_confirm(original.id, final_amount, &original); });
}

std::vector<const Rule*>
LimitCounter::original_window_rules(std::string_view op, const Transaction& original,
                                    std::shared_ptr<const RulesInForce>& in_force) const {
  in_force = rules_to_decide(op, original.id);
  detail::validate_transaction(in_force->rules, original);
  detail::check_quantity(quoted_id(original.id) + " amount", original.amount);
  return detail::match_rules(in_force->rules, original).window;
}

std::string LimitCounter::append_original_args(std::vector<std::string>& args,
                                               const Transaction& original,
                                               const std::vector<const Rule*>& window_rules,
                                               const std::string& record_key) const {
  detail::DecideContext context;
  context.calendar = &calendar_;
  context.keys = &keys_;
  // A window of the original may have closed long ago: its key is gone, and the script leaves
  // it alone, so no window is refused here.
  context.refuse_closed_windows = false;
  context.replay_horizon = options_.replay_horizon;
  if (redis_.is_cluster()) {
    context.replay_horizon += detail::share_record_margin; // a share's record
  }
  context.now = Clock::now();
  context.record_key = &record_key;
  if (args.front() == "cancel") {
    args.emplace_back(); // (ARGV[4], the probe: none)
  }
  return detail::append_original(args, original, window_rules, context);
}

ConfirmResult LimitCounter::run_confirm(const std::string& transaction_id,
                                        std::optional<std::int64_t> final_amount,
                                        const Transaction* original) {
  validate_key_part("transaction id", transaction_id, ":");
  if (final_amount) {
    detail::check_quantity(quoted_id(transaction_id) + " final amount", *final_amount);
  }
  std::vector<std::string> args{"confirm", final_amount ? std::to_string(*final_amount) : "-1",
                                std::to_string(detail::unix_millis(Clock::now()))};
  const Reply reply = freeing_transition(transaction_id, args, original);
  throw_if_mismatch(reply, "confirm", transaction_id);
  const std::string& status = reply.at(0).as_string();
  if (const auto result = detail::decode_confirm(reply)) {
    return *result;
  }
  if (status == "unknown") {
    throw Error(errc::not_found,
                "confirm: " + quoted_id(transaction_id) +
                    " is unknown: never reserved, or reserved before the replay horizon (" +
                    std::to_string(options_.replay_horizon.count()) + " ms)",
                Outcome::failed);
  }
  if (status == "expired") {
    throw Error(errc::conflict,
                "confirm: the reservation of " + quoted_id(transaction_id) +
                    " expired and its hold was released",
                Outcome::failed);
  }
  if (status == "bad_state") {
    throw Error(errc::conflict,
                "confirm: " + quoted_id(transaction_id) + " is " + reply.at(1).as_string() +
                    ", not reserved",
                Outcome::failed);
  }
  if (status == "too_much") {
    throw Error(errc::invalid_argument,
                "confirm: final amount " + std::to_string(*final_amount) + " of " +
                    quoted_id(transaction_id) + " is more than the " + reply.at(1).as_string() +
                    " held",
                Outcome::failed);
  }
  throw_unexpected(reply, "confirm " + transaction_id);
}

CancelResult LimitCounter::cancel(const std::string& transaction_id) {
  return observed(options_.observer.get(), LimitOp::cancel,
                  [&] { return run_cancel(transaction_id, nullptr); });
}

CancelResult LimitCounter::cancel(const Transaction& original) {
  return observed(options_.observer.get(), LimitOp::cancel,
                  [&] { return run_cancel(original.id, &original); });
}

CancelResult LimitCounter::run_cancel(const std::string& transaction_id,
                                      const Transaction* original) {
  validate_key_part("transaction id", transaction_id, ":");
  const auto now = Clock::now();
  // An unknown id is recorded in every record it could have, so a later reserve of any
  // share of it is refused.
  const std::vector<std::string> args{
      "cancel", std::to_string(detail::unix_millis(now)),
      std::to_string(detail::unix_millis(now + options_.replay_horizon))};
  const Reply reply = freeing_transition(transaction_id, args, original);
  throw_if_mismatch(reply, "cancel", transaction_id);
  const std::string& status = reply.at(0).as_string();
  if (const auto result = detail::decode_cancel(reply, transaction_id)) {
    return *result;
  }
  if (status == "bad_state") {
    const std::string& state = reply.at(1).as_string();
    throw Error(errc::conflict,
                "cancel: " + quoted_id(transaction_id) + " is " + state +
                    (state == "pending" ? " (its decision is under way: cancel it once it returns)"
                                        : " (refund a consumed transaction instead)"),
                Outcome::failed);
  }
  throw_unexpected(reply, "cancel " + transaction_id);
}

RefundResult LimitCounter::refund(const std::string& transaction_id,
                                  std::optional<std::int64_t> amount,
                                  const std::string& refund_id) {
  return observed(options_.observer.get(), LimitOp::refund,
                  [&] { return run_refund(transaction_id, amount, refund_id, nullptr); });
}

RefundResult LimitCounter::refund(const Transaction& original, std::optional<std::int64_t> amount,
                                  const std::string& refund_id) {
  return observed(options_.observer.get(), LimitOp::refund,
                  [&] { return run_refund(original.id, amount, refund_id, &original); });
}

RefundResult LimitCounter::run_refund(const std::string& transaction_id,
                                      std::optional<std::int64_t> amount,
                                      const std::string& refund_id, const Transaction* original) {
  validate_key_part("transaction id", transaction_id, ":");
  if (amount) {
    detail::check_quantity(quoted_id(transaction_id) + " refund amount", *amount, true);
    if (refund_id.empty()) {
      throw Error(errc::invalid_argument,
                  "refund of " + std::to_string(*amount) + " from " + quoted_id(transaction_id) +
                      " needs a refund id (partial refunds are idempotent by it)");
    }
  }
  if (!refund_id.empty()) {
    validate_key_part("refund id", refund_id, ":");
  }
  if (original != nullptr && amount && *amount > original->amount) {
    // never refundable (a record's amount is the original's, or less once confirmed for less);
    // refused before anything is sent: past the horizon the refund would record the original
    // anew (a cluster's home record, op adopt) before it is decided
    throw Error(errc::invalid_argument,
                "refund of " + std::to_string(*amount) + " from " + quoted_id(transaction_id) +
                    " is more than its original amount " + std::to_string(original->amount));
  }
  std::vector<std::string> args{"refund", amount ? std::to_string(*amount) : "-1",
                                amount ? refund_id : ""};
  const Reply reply = freeing_transition(transaction_id, args, original);
  throw_if_mismatch(reply, "refund", transaction_id);
  const std::string& status = reply.at(0).as_string();
  if (status == "refunded") {
    return {reply.at(1).to_int64(), reply.at(2).to_int64(), reply.at(3).to_int64(),
            reply.at(4).as_string() == "1"};
  }
  if (status == "conflict") {
    const std::string first = reply.at(1).as_string();
    throw Error(errc::conflict,
                "refund id \"" + refund_id + "\" of " + quoted_id(transaction_id) +
                    " was first used for " + (first == "-1" ? "the full refund" : first) +
                    ", not " + (amount ? std::to_string(*amount) : "the full refund"),
                Outcome::failed);
  }
  if (status == "unknown") {
    throw Error(errc::not_found,
                "refund: " + quoted_id(transaction_id) +
                    " is unknown: never decided, or decided before the replay horizon (" +
                    std::to_string(options_.replay_horizon.count()) +
                    " ms); refund it with the original transaction",
                Outcome::failed);
  }
  if (status == "bad_state") {
    throw Error(errc::conflict,
                "refund: " + quoted_id(transaction_id) + " is " + reply.at(1).as_string() +
                    ", so nothing of it was consumed",
                Outcome::failed);
  }
  if (status == "too_much") {
    throw Error(errc::invalid_argument,
                "refund of " + std::to_string(amount.value_or(0)) + " from " +
                    quoted_id(transaction_id) + " is more than the " + reply.at(1).as_string() +
                    " still refundable",
                Outcome::failed);
  }
  throw_unexpected(reply, "refund " + transaction_id);
}

} // namespace limitcounter
