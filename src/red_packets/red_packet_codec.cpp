#include "red_packets/red_packet_codec.hpp"

#include <limitcounter/error.hpp>

namespace limitcounter::detail {

GrabResult decode_grab(const Reply& reply, std::string_view packet_id) {
  const std::string& status = reply.at(0).as_string();
  GrabResult result;
  if (status == "granted" || status == "already") {
    result.status = status == "granted" ? GrabResult::Status::granted : GrabResult::Status::already;
    result.amount = reply.at(1).to_int64();
  } else if (status == "sold_out") {
    result.status = GrabResult::Status::sold_out;
  } else if (status == "expired") {
    result.status = GrabResult::Status::expired;
  } else if (status == "too_many_attempts") {
    result.status = GrabResult::Status::too_many_attempts;
  } else if (status == "unknown") {
    throw Error(errc::not_found, "red packet \"" + std::string(packet_id) + "\" does not exist",
                Outcome::failed);
  } else {
    throw Error(errc::protocol_error, "unexpected grab reply " + reply.debug_string(),
                Outcome::unknown);
  }
  return result;
}

std::vector<PayoutTask> decode_take(const Reply& reply, std::uint32_t partition) {
  const auto& items = reply.as_array();
  if (items.size() % 4 != 0) {
    throw Error(errc::protocol_error, "unexpected take reply " + reply.debug_string(),
                Outcome::unknown);
  }
  std::vector<PayoutTask> tasks;
  tasks.reserve(items.size() / 4);
  for (std::size_t i = 0; i < items.size(); i += 4) {
    const std::string& id = items[i].as_string();
    const auto cut = id.find(':');
    if (cut == std::string::npos) {
      throw Error(errc::protocol_error, "payout task id " + id + " has no ':'", Outcome::unknown);
    }
    PayoutTask task;
    task.packet_id = id.substr(0, cut);
    task.user_id = id.substr(cut + 1);
    task.amount = items[i + 1].to_int64();
    task.attempt = static_cast<int>(items[i + 2].to_int64());
    task.lease = static_cast<std::uint64_t>(items[i + 3].to_int64());
    task.partition = partition;
    tasks.push_back(std::move(task));
  }
  return tasks;
}

} // namespace limitcounter::detail
