#pragma once
// Decision: the answer of a limit check. A denial is a value, not an exception.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <limitcounter/calendar.hpp>
#include <limitcounter/transaction_state.hpp>
#include <limitcounter/usage.hpp>

namespace limitcounter {

/// What a limit counts.
enum class Metric {
  count,         ///< transactions per window
  amount,        ///< minor units per window
  single_amount, ///< minor units of one transaction
  unavailable,   ///< Redis could not answer and the rule's failure policy is deny
};

/// "count", "amount" or "single_amount".
std::string_view to_string(Metric metric) noexcept;

/// Why a transaction was denied.
struct Denial {
  std::string rule;           ///< the denying rule's name
  Metric metric;              ///< which of its limits
  std::int64_t limit = 0;     ///< the limit
  std::int64_t used = 0;      ///< already used in the window (0 for single_amount)
  std::int64_t requested = 0; ///< what the transaction asked for (1 for count)
};

/// Where one applicable window rule stands.
struct RuleStatus {
  std::string rule;                       ///< the rule's name
  Period period;                          ///< the rule's window length
  std::string window_id;                  ///< the window's local-time id (see `Window::id`)
  TimePoint resets_at;                    ///< the window's end
  std::optional<std::int64_t> max_count;  ///< transactions per window (empty: no count limit)
  std::optional<std::int64_t> max_amount; ///< minor units per window (empty: no amount limit)
  /// The counter after this transaction (allowed) or as found (denied); in a replay on
  /// standalone Redis, as it is now.
  Usage used;

  /// How many more transactions fit (empty when the rule has no count limit).
  std::optional<std::int64_t> remaining_count() const {
    return max_count
               ? std::optional<std::int64_t>(std::max<std::int64_t>(*max_count - used.count, 0))
               : std::nullopt;
  }
  /// How much more amount fits (empty when the rule has no amount limit).
  std::optional<std::int64_t> remaining_amount() const {
    return max_amount
               ? std::optional<std::int64_t>(std::max<std::int64_t>(*max_amount - used.amount, 0))
               : std::nullopt;
  }
};

/// The outcome of consume, reserve or check.
struct Decision {
  /// Whether the transaction may go ahead.
  enum class Verdict {
    allowed, ///< every applicable rule had room; the counters moved (not for check)
    denied,  ///< a rule had no room (see `denial`); nothing moved
    /// the id was cancelled before it was reserved, or (on a cluster) abandoned by
    /// `LimitCounter::finish_interrupted` before anyone learnt its decision; nothing moved
    cancelled,
  };

  Verdict verdict = Verdict::allowed; ///< see `Verdict`
  /// True when the id had been decided before: this is that first decision, and nothing
  /// moved now. `state` then says where the transaction is now.
  bool replayed = false;
  /// Where the transaction stands: for consume and reserve, consumed, reserved or denied (a
  /// degraded or `cached` decision too: what it would have recorded); none for check. For
  /// replays: consumed, denied, reserved, confirmed, cancelled or expired; voided for a
  /// transaction the cluster sweep abandoned, cancelled for an id cancelled before its reserve
  /// (both `Verdict::cancelled`).
  TransactionState state = TransactionState::none;
  /// True for `check`: decided without consuming.
  bool dry_run = false;
  /// True when Redis could not answer and the rules' failure policy decided (allow or
  /// deny) without counting anything.
  bool degraded = false;
  /// True for a denial decided by this process from a denial Redis gave within
  /// `ExhaustedCacheOptions::max_staleness` (LimitCounterOptions::exhausted_cache): nothing
  /// was sent and nothing recorded in Redis, so this is not the id's decision. A retry of the
  /// same id after the cache entry has expired asks Redis, which may allow it if room was
  /// freed meanwhile, or replay what it decided for the id before. `denial` names the limit
  /// and the `used` Redis reported; `rules` is empty.
  bool cached = false;
  /// Which rule and limit denied (set when `verdict` is denied; for a replay, the first
  /// decision's denial, with `used` as it was then).
  std::optional<Denial> denial;
  /// Every applicable window rule, in rule-set order (empty for a `cached` denial). For a
  /// replay on standalone Redis, the rules in force now with their counters as they are now
  /// (the transaction's record keeps no totals); on a Redis Cluster, empty: the home record
  /// keeps the first decision's verdict and denial only, and reading the counters of every
  /// share would cost a round trip per slot (call `check` or `usage` for where the rules stand).
  std::vector<RuleStatus> rules;
  /// The version of the rule set this call was decided by (`LimitCounter::set_rules`; 0 for
  /// rules set without a version). A replay reports the version in force at the replay, not
  /// the one of the first decision (the transaction's record does not keep it).
  std::uint64_t rule_set_version = 0;

  /// `verdict == Verdict::allowed`.
  bool allowed() const noexcept { return verdict == Verdict::allowed; }
};

} // namespace limitcounter
