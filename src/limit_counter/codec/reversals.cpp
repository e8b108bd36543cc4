#include "limit_counter/codec/reversals.hpp"

#include <limitcounter/error.hpp>
#include <limitcounter/key_part.hpp>

#include "limit_counter/codec/common.hpp"

namespace limitcounter::detail {

std::optional<ConfirmResult> decode_confirm(const Reply& reply) {
  const ReplyStatus status = reply_status(reply);
  ConfirmResult result;
  if (status == ReplyStatus::confirmed) { // {"confirmed", final, released, ...}
    result.amount = reply.at(1).to_int64();
    result.released = reply.at(2).to_int64();
  } else if (status == ReplyStatus::already) { // {"already", "confirmed", final, ...}
    result.replayed = true;
    result.amount = reply.at(2).to_int64();
  } else {
    return std::nullopt;
  }
  return result;
}

std::optional<CancelResult> decode_cancel(const Reply& reply, std::string_view transaction_id) {
  const ReplyStatus status = reply_status(reply);
  CancelResult result;
  if (status == ReplyStatus::tombstone) {
    result.status = CancelResult::Status::recorded_unknown;
  } else if (status == ReplyStatus::expired) { // (a cluster's home record: its hold had run out)
    result.status = CancelResult::Status::expired;
  } else if (status == ReplyStatus::already) {
    const TransactionState state =
        transaction_state(reply.at(1).as_string(), "the cancel of " + quoted_id(transaction_id));
    if (state == TransactionState::expired) {
      result.status = CancelResult::Status::expired;
    } else if (state == TransactionState::cancelled || state == TransactionState::voided) {
      result.replayed = true;
    } else {
      throw Error(errc::protocol_error,
                  "cancel of " + quoted_id(transaction_id) + ": ended in unexpected state " +
                      std::string(to_string(state)),
                  Outcome::unknown);
    }
  } else if (status != ReplyStatus::cancelled) {
    return std::nullopt;
  }
  return result;
}

} // namespace limitcounter::detail
