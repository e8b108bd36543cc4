#pragma once
// The replies of confirm and cancel (lua/limit.lua, or lua/transaction_home.lua on a cluster), and
// what a share's reply to the op that follows its home record says. Pure; unit-tested without a
// server.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <limitcounter/limit_counter.hpp>
#include <limitcounter/reply.hpp>

#include "limit_counter/codec/reply_status.hpp"

namespace limitcounter::detail {

/// A confirm's reply (lua/limit.lua, or lua/transaction_home.lua on a cluster): "confirmed" as
/// confirmed now, "already" (confirmed before) as `replayed`; empty for any other status (an
/// error the caller names). Throws as `reply_status` does for a reply that begins with none.
std::optional<ConfirmResult> decode_confirm(const Reply& reply);
/// A cancel's reply, likewise: "cancelled" as cancelled now, "tombstone" as recorded_unknown,
/// "already" with the state the record shows: "expired" (the timeout ended it, no cancel did)
/// as expired, "cancelled" (an earlier cancel, or its tombstone) or "voided" (the cluster
/// sweep abandoned its reserve) as a replayed cancel. Empty for any other status; throws
/// protocol_error (Outcome::unknown) naming `transaction_id` for "already" with another state,
/// and as `reply_status` does for a reply that begins with no status.
std::optional<CancelResult> decode_cancel(const Reply& reply, std::string_view transaction_id);

/// The share operation (lua/limit.lua) that follows a home record's expiry: a confirm "now" at
/// the largest time, so that every share still holding releases its hold as expired, whatever
/// its own (later) hold expiry.
inline std::vector<std::string> expire_share() { return {"confirm", "-1", "9007199254740991"}; }

/// Whether a share's reply to the confirm (or refund) by which it follows its home record's
/// confirm says its hold was lost before it could follow: "expired" (this confirm found its hold
/// released by a sweep and recorded it expired) or "bad_state expired" (recorded so before).
/// Its counters then do not count the confirmed amount.
inline bool lost_hold(const Reply& share_reply) {
  const ReplyStatus status = reply_status(share_reply);
  return status == ReplyStatus::expired ||
         (share_reply.as_array().size() > 1 && status == ReplyStatus::bad_state &&
          share_reply.at(1).as_string() == "expired");
}

} // namespace limitcounter::detail
