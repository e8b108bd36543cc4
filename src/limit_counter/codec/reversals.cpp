#include "limit_counter/codec/reversals.hpp"

#include <limitcounter/error.hpp>
#include <limitcounter/key_part.hpp>

#include "limit_counter/codec/common.hpp"

namespace limitcounter::detail {

std::optional<ConfirmResult> decode_confirm(const Reply& reply) {
  const std::string& status = reply.at(0).as_string();
  ConfirmResult result;
  if (status == "confirmed") { // {"confirmed", final, released, ...}
    result.amount = reply.at(1).to_int64();
    result.released = reply.at(2).to_int64();
  } else if (status == "already") { // {"already", "confirmed", final, ...}
    result.replayed = true;
    result.amount = reply.at(2).to_int64();
  } else {
    return std::nullopt;
  }
  return result;
}

std::optional<CancelResult> decode_cancel(const Reply& reply, std::string_view transaction_id) {
  const std::string& status = reply.at(0).as_string();
  CancelResult result;
  if (status == "tombstone") {
    result.status = CancelResult::Status::recorded_unknown;
  } else if (status == "expired") { // (a cluster's home record: its hold had run out)
    result.status = CancelResult::Status::expired;
  } else if (status == "already") {
    const std::string& state = reply.at(1).as_string();
    if (state == "expired") {
      result.status = CancelResult::Status::expired;
    } else if (state == "cancelled" || state == "voided") {
      result.replayed = true;
    } else {
      throw Error(errc::protocol_error,
                  "cancel of " + quoted_id(transaction_id) + ": ended in unexpected state " +
                      quote_for_message(state),
                  Outcome::unknown);
    }
  } else if (status != "cancelled") {
    return std::nullopt;
  }
  return result;
}

} // namespace limitcounter::detail
