#pragma once
// The limits transaction's state machine as data: for each state a transaction's records can be
// in and each operation of the public API, the state it goes to and what the caller gets. One
// table for both topologies (lua/limit.lua's record on standalone Redis, lua/transaction_home.lua's
// home record and its shares on a Redis Cluster), so that the tests can hold both to it
// (tests/unit/transition_table_test.cpp, tests/redis/transition_table_test.cpp). Pure: no I/O.

#include <array>
#include <cstddef>
#include <string_view>

namespace limitcounter::detail {

/// Where a transaction stands, as `TransactionRecord::state` reports it.
enum class TxState {
  none,     ///< no record: never decided (or past the replay horizon)
  consumed, ///< consume allowed
  reserved, ///< reserve allowed, its hold live
  confirmed,
  cancelled,
  /// a reservation whose hold ran out; its record may still say "reserved" until an
  /// operation sees it
  expired,
  denied,
  tombstone,          ///< a cancel that came before its reserve ("tombstone")
  refunded_consumed,  ///< consumed, then refunded in full (state "consumed", refunded = amount)
  refunded_confirmed, ///< confirmed, then refunded in full (state "confirmed", refunded = amount)
};
inline constexpr std::size_t tx_state_count = 10;

/// An operation on one transaction id; consume and reserve bring the same transaction (id,
/// attributes, amount) that put it in its state.
enum class TxOperation {
  consume,
  reserve,
  confirm,     ///< confirm(id), all that is held
  cancel,      ///< cancel(id)
  refund_full, ///< refund(id), everything not yet refunded
  expire,      ///< the reservation's hold runs out (no call; the next operation sees it)
};
inline constexpr std::size_t tx_operation_count = 6;

/// What the caller gets: a result's fields, or the errc of the Error thrown.
enum class Answer {
  allowed,           ///< Decision allowed, not replayed
  denied,            ///< Decision denied, not replayed
  refused_cancelled, ///< Decision::Verdict::cancelled: the id was cancelled before
  replayed_allowed,  ///< Decision allowed, replayed
  replayed_denied,   ///< Decision denied, replayed
  confirmed,         ///< ConfirmResult, not replayed
  confirm_replayed,  ///< ConfirmResult, replayed
  cancelled,         ///< CancelResult cancelled, not replayed
  cancel_replayed,   ///< CancelResult cancelled, replayed
  cancel_expired,    ///< CancelResult expired
  recorded_unknown,  ///< CancelResult recorded_unknown
  refunded,          ///< RefundResult, not replayed
  refund_replayed,   ///< RefundResult, replayed
  error_conflict,    ///< Error errc::conflict, nothing changed
  error_not_found,   ///< Error errc::not_found, nothing changed
  silent,            ///< no call (expire)
};
inline constexpr std::size_t answer_count = 16;

struct Transition {
  TxState next;
  Answer answer;
};

struct TransitionRow {
  TxState from;
  TxOperation operation;
  TxState next;
  Answer answer;
};

// Rows grouped by state, operations in enum order; `transition` indexes them, and the unit test
// checks that row i is (state i / 6, operation i % 6).
inline constexpr std::array<TransitionRow, tx_state_count * tx_operation_count> transition_rows{{
    // clang-format off
    // from                       operation                 next                         answer
    {TxState::none,               TxOperation::consume,     TxState::consumed,           Answer::allowed},
    {TxState::none,               TxOperation::reserve,     TxState::reserved,           Answer::allowed},
    {TxState::none,               TxOperation::confirm,     TxState::none,               Answer::error_not_found},
    {TxState::none,               TxOperation::cancel,      TxState::tombstone,          Answer::recorded_unknown},
    {TxState::none,               TxOperation::refund_full, TxState::none,               Answer::error_not_found},
    {TxState::none,               TxOperation::expire,      TxState::none,               Answer::silent},

    {TxState::consumed,           TxOperation::consume,     TxState::consumed,           Answer::replayed_allowed},
    {TxState::consumed,           TxOperation::reserve,     TxState::consumed,           Answer::error_conflict},
    {TxState::consumed,           TxOperation::confirm,     TxState::consumed,           Answer::error_conflict},
    {TxState::consumed,           TxOperation::cancel,      TxState::consumed,           Answer::error_conflict},
    {TxState::consumed,           TxOperation::refund_full, TxState::refunded_consumed,  Answer::refunded},
    {TxState::consumed,           TxOperation::expire,      TxState::consumed,           Answer::silent},

    {TxState::reserved,           TxOperation::consume,     TxState::reserved,           Answer::error_conflict},
    {TxState::reserved,           TxOperation::reserve,     TxState::reserved,           Answer::replayed_allowed},
    {TxState::reserved,           TxOperation::confirm,     TxState::confirmed,          Answer::confirmed},
    {TxState::reserved,           TxOperation::cancel,      TxState::cancelled,          Answer::cancelled},
    {TxState::reserved,           TxOperation::refund_full, TxState::reserved,           Answer::error_conflict},
    {TxState::reserved,           TxOperation::expire,      TxState::expired,            Answer::silent},

    {TxState::confirmed,          TxOperation::consume,     TxState::confirmed,          Answer::error_conflict},
    {TxState::confirmed,          TxOperation::reserve,     TxState::confirmed,          Answer::replayed_allowed},
    {TxState::confirmed,          TxOperation::confirm,     TxState::confirmed,          Answer::confirm_replayed},
    {TxState::confirmed,          TxOperation::cancel,      TxState::confirmed,          Answer::error_conflict},
    {TxState::confirmed,          TxOperation::refund_full, TxState::refunded_confirmed, Answer::refunded},
    {TxState::confirmed,          TxOperation::expire,      TxState::confirmed,          Answer::silent},

    {TxState::cancelled,          TxOperation::consume,     TxState::cancelled,          Answer::error_conflict},
    {TxState::cancelled,          TxOperation::reserve,     TxState::cancelled,          Answer::replayed_allowed},
    {TxState::cancelled,          TxOperation::confirm,     TxState::cancelled,          Answer::error_conflict},
    {TxState::cancelled,          TxOperation::cancel,      TxState::cancelled,          Answer::cancel_replayed},
    {TxState::cancelled,          TxOperation::refund_full, TxState::cancelled,          Answer::error_conflict},
    {TxState::cancelled,          TxOperation::expire,      TxState::cancelled,          Answer::silent},

    {TxState::expired,            TxOperation::consume,     TxState::expired,            Answer::error_conflict},
    {TxState::expired,            TxOperation::reserve,     TxState::expired,            Answer::replayed_allowed},
    {TxState::expired,            TxOperation::confirm,     TxState::expired,            Answer::error_conflict},
    {TxState::expired,            TxOperation::cancel,      TxState::expired,            Answer::cancel_expired},
    {TxState::expired,            TxOperation::refund_full, TxState::expired,            Answer::error_conflict},
    {TxState::expired,            TxOperation::expire,      TxState::expired,            Answer::silent},

    {TxState::denied,             TxOperation::consume,     TxState::denied,             Answer::replayed_denied},
    {TxState::denied,             TxOperation::reserve,     TxState::denied,             Answer::error_conflict},
    {TxState::denied,             TxOperation::confirm,     TxState::denied,             Answer::error_conflict},
    {TxState::denied,             TxOperation::cancel,      TxState::denied,             Answer::error_conflict},
    {TxState::denied,             TxOperation::refund_full, TxState::denied,             Answer::error_conflict},
    {TxState::denied,             TxOperation::expire,      TxState::denied,             Answer::silent},

    {TxState::tombstone,          TxOperation::consume,     TxState::tombstone,          Answer::refused_cancelled},
    {TxState::tombstone,          TxOperation::reserve,     TxState::tombstone,          Answer::refused_cancelled},
    {TxState::tombstone,          TxOperation::confirm,     TxState::tombstone,          Answer::error_conflict},
    {TxState::tombstone,          TxOperation::cancel,      TxState::tombstone,          Answer::cancel_replayed},
    {TxState::tombstone,          TxOperation::refund_full, TxState::tombstone,          Answer::error_conflict},
    {TxState::tombstone,          TxOperation::expire,      TxState::tombstone,          Answer::silent},

    {TxState::refunded_consumed,  TxOperation::consume,     TxState::refunded_consumed,  Answer::replayed_allowed},
    {TxState::refunded_consumed,  TxOperation::reserve,     TxState::refunded_consumed,  Answer::error_conflict},
    {TxState::refunded_consumed,  TxOperation::confirm,     TxState::refunded_consumed,  Answer::error_conflict},
    {TxState::refunded_consumed,  TxOperation::cancel,      TxState::refunded_consumed,  Answer::error_conflict},
    {TxState::refunded_consumed,  TxOperation::refund_full, TxState::refunded_consumed,  Answer::refund_replayed},
    {TxState::refunded_consumed,  TxOperation::expire,      TxState::refunded_consumed,  Answer::silent},

    {TxState::refunded_confirmed, TxOperation::consume,     TxState::refunded_confirmed, Answer::error_conflict},
    {TxState::refunded_confirmed, TxOperation::reserve,     TxState::refunded_confirmed, Answer::replayed_allowed},
    {TxState::refunded_confirmed, TxOperation::confirm,     TxState::refunded_confirmed, Answer::confirm_replayed},
    {TxState::refunded_confirmed, TxOperation::cancel,      TxState::refunded_confirmed, Answer::error_conflict},
    {TxState::refunded_confirmed, TxOperation::refund_full, TxState::refunded_confirmed, Answer::refund_replayed},
    {TxState::refunded_confirmed, TxOperation::expire,      TxState::refunded_confirmed, Answer::silent},
    // clang-format on
}};

constexpr Transition transition(TxState from, TxOperation operation) {
  const TransitionRow& row = transition_rows[static_cast<std::size_t>(from) * tx_operation_count +
                                             static_cast<std::size_t>(operation)];
  return {row.next, row.answer};
}

std::string_view to_string(TxState state) noexcept;
std::string_view to_string(TxOperation operation) noexcept;
std::string_view to_string(Answer answer) noexcept;

} // namespace limitcounter::detail
