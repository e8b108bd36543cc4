// RedPacketPool's operator calls: a packet's status and the requeue of a dead payout.
#include <limitcounter/red_packet.hpp>

#include <limitcounter/detail/lua_scripts.hpp>

#include "shared/amount.hpp"

namespace limitcounter {

std::optional<PacketStatus> RedPacketPool::status(const std::string& packet_id, TimePoint now) {
  validate_key_part("red packet id", packet_id);
  const Reply reply =
      redis_.eval(scripts::red_packet,
                  {keys_.packet(packet_id, "meta"), keys_.packet(packet_id, "list"),
                   keys_.packet(packet_id, "drawn"), keys_.packet(packet_id, "attempts")},
                  {"status", packet_id});
  if (reply.at(0).as_string() == "unknown") {
    return std::nullopt;
  }
  PacketStatus status;
  status.total = reply.at(1).to_int64();
  status.count = reply.at(2).to_int64();
  status.expires_at = TimePoint(std::chrono::milliseconds(reply.at(3).to_int64()));
  status.ready = reply.at(4).to_int64() == 1;
  status.closed = reply.at(5).to_int64() == 1;
  status.packets_left = reply.at(6).to_int64();
  status.amount_left = reply.at(7).to_int64();
  status.grabs = reply.at(8).to_int64();
  status.losing_users = reply.at(9).to_int64();
  if (status.closed) {
    status.state = PacketState::closed;
  } else if (!status.ready) {
    status.state = PacketState::creating;
  } else {
    status.state = now >= status.expires_at ? PacketState::expired : PacketState::open;
  }
  return status;
}

std::string_view to_string(PacketState state) noexcept {
  switch (state) {
  case PacketState::creating: return "creating";
  case PacketState::open: return "open";
  case PacketState::expired: return "expired";
  case PacketState::closed: return "closed";
  }
  return "?";
}

RequeueResult RedPacketPool::requeue_payout(const std::string& packet_id,
                                            const std::string& user_id, TimePoint now) {
  validate_key_part("red packet id", packet_id);
  validate_key_part("red packet user id", user_id);
  const std::uint32_t partition = keys_.partition_of(packet_id);
  const Reply reply =
      redis_.eval(scripts::payout,
                  {keys_.payout(partition, "ready"), keys_.payout(partition, "tasks"),
                   keys_.payout(partition, "dead")},
                  {"requeue", packet_id + ":" + user_id, std::to_string(detail::unix_millis(now))},
                  Resend::same_id);
  const std::string& answer = reply.at(0).as_string();
  // "already": requeued by an earlier call, and neither paid nor dead since
  if (answer == "requeued" || answer == "already") {
    return {RequeueResult::Status::requeued, answer == "already"};
  }
  if (answer == "not_dead") {
    return {RequeueResult::Status::not_dead, false};
  }
  throw Error(errc::protocol_error,
              "requeue of payout " + packet_id + ":" + user_id + ": " + reply.debug_string(),
              Outcome::unknown);
}

} // namespace limitcounter
