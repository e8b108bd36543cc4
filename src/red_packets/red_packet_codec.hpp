#pragma once
// Arguments and replies of lua/red_packet.lua and lua/payout.lua. Pure; unit-tested
// without a server.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <limitcounter/red_packet.hpp>
#include <limitcounter/reply.hpp>

namespace limitcounter::detail {

/// The digest of a packet's content, 16 hex digits (64-bit FNV-1a over the amounts in order,
/// their count, the expiry and the attempt cap). Stored at create, so that a retried create is
/// checked against it without sending the amounts again.
std::string content_digest(const std::vector<std::int64_t>& amounts, std::string_view expires_ms,
                           int max_attempts);

/// Throws invalid_argument unless each field of `display` is at most
/// `RedPacketPool::max_display_bytes` bytes of display text (`validate_display_text`).
void validate_display(const UserDisplay& display);

/// "" if both fields are empty, else "<nickname bytes>:<nickname><avatar url>".
std::string encode_display(const UserDisplay& display);
/// The inverse of `encode_display`; throws protocol_error for a malformed value.
UserDisplay decode_display(std::string_view encoded);

/// A grab reply. Throws not_found for {"unknown"} and {"not_ready"}, protocol_error for
/// anything unexpected.
GrabResult decode_grab(const Reply& reply, std::string_view packet_id);

/// A close reply. Throws not_found for {"unknown"} and {"not_ready"}, protocol_error for
/// anything unexpected.
CloseResult decode_close(const Reply& reply, std::string_view packet_id);

/// A take reply: flat task, amount, attempt, lease, display quintuples. Task ids are
/// "<packet>:<user>".
std::vector<PayoutTask> decode_take(const Reply& reply, std::uint32_t partition);

} // namespace limitcounter::detail
