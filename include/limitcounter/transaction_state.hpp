#pragma once
// TransactionState: where a limits transaction stands, as its records in Redis say.

#include <string_view>

namespace limitcounter {

/// Where a limits transaction stands (`Decision::state`, `TransactionRecord::state`,
/// `InterruptedFanOut::state`).
enum class TransactionState {
  none,      ///< no state: a `check` (a dry run decides nothing)
  consumed,  ///< consume allowed (refunds keep it consumed: see `TransactionRecord::refunded`)
  denied,    ///< consume or reserve denied
  reserved,  ///< reserve allowed, its hold live (or run out, until an operation sees it)
  confirmed, ///< a reservation confirmed (refunds keep it confirmed)
  cancelled, ///< a reservation cancelled
  expired,   ///< a reservation whose hold ran out before a confirm or cancel
  /// a cluster share undone because another slot denied, or a home record the cluster sweep
  /// abandoned (`LimitCounter::finish_interrupted`): the transaction did not happen
  voided,
  pending,   ///< a cluster decision under way
  tombstone, ///< a cancel that came before its reserve: a later reserve of the id is refused
};

/// The word of `state` as the scripts record it and limitctl prints it ("consumed", "denied",
/// ..., "tombstone"); "none" for none. A word the library reads from Redis that names no state
/// is a protocol_error (Outcome::unknown), never a default state.
std::string_view to_string(TransactionState state) noexcept;

} // namespace limitcounter
