#pragma once
// Replies of lua/red_packet.lua and lua/payout.lua. Pure; unit-tested without a server.

#include <string_view>
#include <vector>

#include <limitcounter/red_packet.hpp>
#include <limitcounter/reply.hpp>

namespace limitcounter::detail {

/// A grab reply. Throws not_found for {"unknown"}, protocol_error for anything unexpected.
GrabResult decode_grab(const Reply& reply, std::string_view packet_id);

/// A take reply: flat task, amount, attempt, lease quadruples. Task ids are "<packet>:<user>".
std::vector<PayoutTask> decode_take(const Reply& reply, std::uint32_t partition);

} // namespace limitcounter::detail
