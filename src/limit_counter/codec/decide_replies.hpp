#pragma once
// The replies of lua/limit.lua's decide calls (one call's, or a batch's), read into Decisions.
// Pure; unit-tested without a server.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include <limitcounter/decision.hpp>
#include <limitcounter/reply.hpp>

#include "limit_counter/codec/decide_arguments.hpp"

namespace limitcounter::detail {

/// The replies of a batch call (op batch: one flat array, each transaction's reply after the
/// one before; see lua/limit.lua), one per transaction as `decode_decision` reads them. Throws
/// protocol_error (Outcome::unknown) unless the reply holds exactly `count` of them.
std::vector<Reply> split_decide_replies(const Reply& reply, std::size_t count);

/// Turns a decide reply (one transaction's) into a Decision, read with the call's `shape`.
/// `requested_amount` is the transaction's amount. Throws `Error` (conflict) when the id was used
/// for different content. A replay reports the first decision's verdict and denial, and the call's
/// rules with their counters' totals as they are now.
Decision decode_decision(const Reply& reply, const DecideShape& shape,
                         std::string_view transaction_id, std::int64_t requested_amount);

} // namespace limitcounter::detail
