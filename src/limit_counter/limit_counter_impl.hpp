#pragma once
// LimitCounter::Impl: everything LimitCounter keeps and does, behind its public header, so that
// the library's ABI does not change with it. LimitCounter forwards each public call to the
// method of the same name here (src/limit_counter/limit_counter.cpp); the contracts are the
// public header's. Where each method is defined, by responsibility: docs/ARCHITECTURE.md
// ("Domain").

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <limitcounter/limit_counter.hpp>

#include "limit_counter/codec/decide_arguments.hpp"
#include "limit_counter/codec/rule_args.hpp"
#include "limit_counter/exhausted_cache.hpp"
#include "limit_counter/local_ledger.hpp"

namespace limitcounter {

namespace detail {
template <typename Job> class Coalescer;

/// The state a first decision of `op` puts its transaction in: none for a check, which records
/// nothing.
inline TransactionState decided_state(LimitOp op, bool allowed) {
  if (op == LimitOp::check) {
    return TransactionState::none;
  }
  if (!allowed) {
    return TransactionState::denied;
  }
  return op == LimitOp::reserve ? TransactionState::reserved : TransactionState::consumed;
}
} // namespace detail

class LimitCounter::Impl {
public:
  Impl(Redis redis, Calendar calendar, LimitCounterOptions options);

  // The public calls (LimitCounter's, same names and contracts; no default arguments here:
  // LimitCounter passes every one).
  std::vector<WindowUsage> add(std::string_view counter, const Dimension& dimension,
                               const std::vector<Period>& periods, std::int64_t count,
                               std::int64_t amount, TimePoint at);
  std::vector<BatchResult<std::vector<WindowUsage>>>
  add_many(const std::vector<AddRequest>& requests);
  Usage usage(std::string_view counter, const Dimension& dimension, Period period, TimePoint at);
  DimensionPage dimensions(std::string_view counter, Period period, TimePoint at,
                           std::string_view cursor, std::int64_t count);
  CapUsage cap_usage(std::string_view cap, std::string_view subject, TimePoint at);
  CorrectionResult adjust(std::string_view counter, const Dimension& dimension, Period period,
                          const CounterCorrection& correction, TimePoint at);
  std::optional<TransactionRecord> transaction_record(const std::string& transaction_id,
                                                      const std::vector<std::string>& counters);
  void set_rules(RuleSet rules, std::uint64_t version);
  std::uint64_t rule_set_version() const;
  std::shared_ptr<const RuleSet> rules() const;
  Decision consume(const Transaction& transaction);
  std::vector<BatchResult<Decision>> consume_many(const std::vector<Transaction>& transactions);
  Decision reserve(const Transaction& transaction);
  Decision check(const Transaction& transaction);
  ConfirmResult confirm(const std::string& transaction_id,
                        std::optional<std::int64_t> final_amount);
  ConfirmResult confirm(const Transaction& original, std::optional<std::int64_t> final_amount);
  CancelResult cancel(const std::string& transaction_id);
  CancelResult cancel(const Transaction& original);
  RefundResult refund(const std::string& transaction_id, std::optional<std::int64_t> amount,
                      const std::string& refund_id);
  RefundResult refund(const Transaction& original, std::optional<std::int64_t> amount,
                      const std::string& refund_id);
  std::vector<InterruptedFanOut> finish_interrupted(std::chrono::seconds older_than,
                                                    std::size_t max);
  CapDecision take_daily_cap(std::string_view cap, std::string_view subject,
                             std::int64_t max_per_day, TimePoint at, std::int64_t n);
  std::vector<BatchResult<CapDecision>>
  take_daily_cap_many(const std::vector<CapRequest>& requests);
  SlidingDecision hit_sliding_window(std::string_view limiter, std::string_view subject,
                                     std::int64_t max, std::chrono::milliseconds window,
                                     TimePoint at);
  std::vector<BatchResult<SlidingDecision>>
  hit_sliding_window_many(const std::vector<SlidingRequest>& requests);
  const Calendar& calendar() const noexcept { return calendar_; }
  const CounterKeys& keys() const noexcept { return keys_; }

private:
  /// A decide call ready to send.
  struct PreparedDecision {
    /// A per-transaction rule the amount passes: the script decides (and records) it too;
    /// this copy decides when Redis cannot be reached.
    std::optional<Denial> single_denial;
    ScriptCall call;
    /// On a Redis Cluster whose counters fall in several slots: one call per slot, each
    /// with its own record (`call` is then unused).
    std::vector<ScriptCall> shares;
    /// With `shares`: each share's counter tag, the plan the home record keeps.
    std::vector<std::string> share_tags;
    /// What the replies of `call` (or of each of `shares`) are read with.
    std::vector<detail::DecideShape> shapes;
    /// With `shares`: the home record's hold expiry (ms), a grace before the shares' own.
    std::string home_hold_expiry;
    FailurePolicy on_failure = FailurePolicy::raise;  ///< of the applicable rules, the strictest
    std::string failure_rule;                         ///< the rule whose policy that is
    std::vector<detail::LocalCounter> local_counters; ///< for FailurePolicy::local
    /// With the exhausted cache on: the counters of the window rules, the cache's generation
    /// before sending, and the denial the cache decided (then nothing else is prepared).
    std::vector<detail::ExhaustedPlace> places;
    std::uint64_t cache_generation = 0;
    /// The `now` the call carries: Redis judges holds expired by it, so a denial is weighed
    /// against this process's holds at this time, not when its reply came.
    TimePoint now;
    std::optional<Decision> cached;
  };
  /// `rule_args`: those of `rules` under `keys_`, or nullptr (each call builds its own).
  PreparedDecision prepare_decide(LimitOp op, const Transaction& transaction, const RuleSet& rules,
                                  const detail::RuleSetArgs* rule_args, TimePoint now) const;
  Decision finish_decide(LimitOp op, const Transaction& transaction,
                         const detail::DecideShape& shape, const Reply& reply) const;
  /// One consume, reserve or check: `decide_items` with one item; throws its error.
  Decision decide(LimitOp op, const Transaction& transaction);
  /// A rule set and the version it was set with, swapped together.
  struct RulesInForce {
    RuleSet rules;
    std::uint64_t version = 0;
    /// What decide calls take from `rules` whatever the transaction, built with them.
    std::shared_ptr<const detail::RuleSetArgs> args;
  };
  /// The rules to decide by; throws invalid_argument if `set_rules` was never called.
  std::shared_ptr<const RulesInForce> rules_to_decide(LimitOp op, const std::string& id) const;
  /// Whether `error` lets the failure policy decide: only when nothing was sent.
  bool policy_decides(const Error& error, const PreparedDecision& prepared) const;
  /// One decision on its way (the job of `coalescer_`): the transaction, its prepared call(s)
  /// and, once decided, its decision or the error it ended with (exactly one of the two).
  struct DecideItem {
    const Transaction* transaction = nullptr;
    PreparedDecision prepared;
    std::optional<Decision> decision;
    std::optional<Error> error;
  };
  /// The one decision path (limits/decide.cpp): the local layers around `decide_remotely`.
  /// A decision of the exhausted cache is taken as it is; the others are decided by Redis
  /// (a lone consume merged with concurrent ones through `coalescer_`); then, item by item, the
  /// failure policy decides one whose call was not sent (the observer hears that error), the
  /// cache learns, the local fallback's usage is reported once Redis decided something, and the
  /// observer hears each decision (an item left with an error is its caller's to report).
  /// `version`: the rule set's, put in each decision.
  void decide_items(LimitOp op, DecideItem* const* items, std::size_t count, std::uint64_t version,
                    TimePoint started);
  /// The remote decider (limits/remote_decider.cpp): what Redis decides for each item, or
  /// the error its call(s) ended with; knows nothing of the cache, the failure policies or the
  /// local fallback. One-slot items go in script calls of lua/limit.lua (consumes on standalone
  /// Redis in batch calls of up to `max_decide_batch`; a lone item as its own call), items with
  /// shares through their home records (`decide_in_shares`). Throws nothing of one item's.
  void decide_remotely(LimitOp op, DecideItem* const* items, std::size_t count);
  /// `decide_remotely` of a lone consume, merged with the consumes of other threads that come
  /// while one is in flight (`LimitCounterOptions::consume_in_flight`).
  void decide_remotely_merged(DecideItem& item);
  /// One-slot items of `decide_remotely`.
  void decide_in_one_slot(LimitOp op, DecideItem* const* items, std::size_t count);
  /// Consumes on standalone Redis, at most `max_decide_batch`, in one batch call.
  void decide_in_one_batch_call(DecideItem* const* items, std::size_t count);
  /// Each of `count` items' decision from its own reply (or the error reading it gave).
  void finish_items(LimitOp op, DecideItem* const* items, const Reply* replies, std::size_t count);
  Decision finish_one_slot(LimitOp op, const Transaction& transaction,
                           const detail::DecideShape& shape, const Reply& reply);
  void report(LimitOp op, const Transaction& transaction, const Decision& decision,
              TimePoint started) const;
  /// `confirm`, `cancel` and `refund` without reporting to the observer.
  /// With `original`, what it brings for when the record is gone (see `append_original_args`).
  ConfirmResult run_confirm(const std::string& transaction_id,
                            std::optional<std::int64_t> final_amount, const Transaction* original);
  CancelResult run_cancel(const std::string& transaction_id, const Transaction* original);
  RefundResult run_refund(const std::string& transaction_id, std::optional<std::int64_t> amount,
                          const std::string& refund_id, const Transaction* original);
  /// The window rules `original` matches under the rules in force (`in_force` keeps them
  /// alive). Throws as `consume` for a bad transaction.
  std::vector<const Rule*>
  original_window_rules(LimitOp op, const Transaction& original,
                        std::shared_ptr<const RulesInForce>& in_force) const;
  /// Appends to `args` the original transaction's part of a reversal (lua/limit.lua,
  /// ARGV[o..]) on record `record_key` under `window_rules`; returns its counter set key ('' for
  /// none).
  std::string append_original_args(LimitOp op, std::vector<std::string>& args,
                                   const Transaction& original,
                                   const std::vector<const Rule*>& window_rules,
                                   const std::string& record_key) const;
  /// A cluster reversal's original against its home record (cluster/reversals.cpp).
  Reply check_original_at_home(LimitOp op, const std::string& transaction_id,
                               const std::vector<std::string>& args, const Transaction& original,
                               std::vector<ScriptCall>& refunds_with_original);
  /// Applies the change `home` (the home record's answer to `args`) to every share.
  void follow_home_change(LimitOp op, const std::string& transaction_id,
                          const std::vector<std::string>& args, const Reply& home,
                          const std::vector<ScriptCall>& refunds_with_original);
  Decision decide_without_redis(LimitOp op, const Transaction& transaction,
                                const PreparedDecision& prepared);
  /// Adds what this node allowed on its own while Redis was away to the Redis counters.
  void report_local_usage();
  /// How much longer the holds of a cluster transaction's shares last than its home record's:
  /// zero on standalone Redis.
  std::chrono::milliseconds share_hold_grace() const;
  /// Items of `decide_remotely` whose counters are spread over cluster slots
  /// (cluster/decide_in_shares.cpp): each begun at its home record, decided by its shares,
  /// made final at the home record by compare-and-set (`decide_many_in_shares`); a check
  /// runs its shares only (`check_in_shares`).
  void decide_in_shares(LimitOp op, const std::vector<DecideItem*>& items);
  /// `decide_in_shares` of several transactions (each with shares) at once, step by step: every
  /// begin in one pipeline, then every share, then every finish (each transaction's steps in its
  /// order). One result per transaction, its decision or the error its own steps ended with; throws
  /// nothing of one transaction's.
  std::vector<BatchResult<Decision>>
  decide_many_in_shares(LimitOp op, const std::vector<const Transaction*>& transactions,
                        const std::vector<const PreparedDecision*>& prepared);
  Decision check_in_shares(const Transaction& transaction, const PreparedDecision& prepared);
  /// What a begun transaction's shares decided, before its home record has it.
  struct SharesDecided {
    Decision combined;
    std::vector<std::string> counted; ///< the share records whose counters it moved
    bool replayed_share = false;      ///< a share was decided by an earlier caller of the id
    /// The home record's decision when a share was voided (the sweep abandoned the transaction
    /// before that share was decided, e.g. between a send whose reply was lost and its resend):
    /// no finish then.
    std::optional<Decision> abandoned;
  };
  /// The home record's answer to begin: the decision it already has, or none (go on).
  std::optional<Decision> after_begin(const Transaction& transaction,
                                      const PreparedDecision& prepared, const Reply& begun);
  /// Reads the shares' replies; gives back what moved and throws when there is nothing to
  /// decide on, or answers from the home record when a share was voided.
  SharesDecided after_shares(LimitOp op, const Transaction& transaction,
                             const PreparedDecision& prepared, const std::vector<Reply>& replies);
  /// The home record's answer to finish: the decision.
  Decision after_finish(const Transaction& transaction, const PreparedDecision& prepared,
                        const SharesDecided& decided, const Reply& finished);
  Decision replay_home(const Transaction& transaction, const Reply& final_reply);
  Decision replay_voided(const Transaction& transaction);
  void void_shares(const Transaction& transaction, const std::string& fingerprint,
                   const std::vector<std::string>& shares);
  /// What the home record of `prepared`'s transaction compares retries by.
  static std::string home_fingerprint(const PreparedDecision& prepared);
  /// The share records of `transaction_id` whose tags the home record's `plan` lists.
  std::vector<std::string> share_records(const std::string& transaction_id,
                                         const std::string& plan) const;
  /// lua/transaction_home.lua on the home record of `transaction_id`.
  Reply run_home(const std::string& transaction_id, const std::vector<std::string>& args);
  /// lua/limit.lua with each of `operations` (in order) on every share record of `plan`, in
  /// one pipeline per node; the replies, share by share. The call of `last_instead` whose first
  /// key is a share's record replaces that share's last operation. Throws on an error reply.
  std::vector<Reply> run_on_shares(const std::vector<std::string>& plan,
                                   const std::vector<std::vector<std::string>>& operations,
                                   const std::vector<ScriptCall>& last_instead = {});
  /// Brings the shares of one home record that `finish_interrupted` took to its state.
  std::optional<InterruptedFanOut> follow_home(const std::string& home_key, const Reply& taken);
  std::vector<std::vector<std::string>>
  share_operations(LimitOp op, const std::vector<std::string>& args, const Reply& home);
  /// Confirm, cancel or refund (`args` as lua/limit.lua takes them): decided at the home record
  /// and applied to every share when the transaction has one; else on its record(s).
  /// With `original` (the host's, for when the record is gone), its part is added where the
  /// record is gone.
  Reply run_transition(LimitOp op, const std::string& transaction_id,
                       const std::vector<std::string>& args, const Transaction* original = nullptr);
  /// The script call of one add; throws on bad input.
  ScriptCall prepare_add(const AddRequest& request, std::vector<WindowUsage>& windows,
                         TimePoint now) const;
  /// The script call of one cap take (and its day in `window`); throws on bad input.
  ScriptCall prepare_cap(const CapRequest& request, Window& window, TimePoint now) const;
  /// The script call of one sliding-window hit; throws on bad input.
  ScriptCall prepare_sliding(const SlidingRequest& request) const;
  // The exhausted cache (limits/cache.cpp).
  /// Fills `prepared.places` and, if the cache denies, `prepared.cached`.
  void consult_cache(LimitOp op, const Transaction& transaction, const RuleSet& rules,
                     const std::vector<const Rule*>& window_rules,
                     PreparedDecision& prepared) const;
  /// Learns from what Redis decided (`decision`) or the error it ended with (`error`).
  void learn(LimitOp op, const Transaction& transaction, const PreparedDecision& prepared,
             const Decision* decision, const Error* error) const;
  /// `run_transition`, then the cache is dropped (room may have been freed), whatever happened.
  Reply freeing_transition(LimitOp op, const std::string& transaction_id,
                           const std::vector<std::string>& args,
                           const Transaction* original = nullptr);

  Redis redis_;
  Calendar calendar_;
  LimitCounterOptions options_;
  CounterKeys keys_;
  mutable std::mutex rules_mutex_;
  std::shared_ptr<const RulesInForce> rules_;
  std::shared_ptr<detail::LocalLedger> local_;
  std::shared_ptr<detail::ExhaustedCache> exhausted_; ///< null when the cache is off
  /// Merges concurrent consumes (`LimitCounterOptions::consume_in_flight`); null when off.
  std::shared_ptr<detail::Coalescer<DecideItem>> coalescer_;
};

} // namespace limitcounter
