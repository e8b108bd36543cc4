#include "red_packets/red_packet_codec.hpp"

#include <charconv>
#include <cstdio>

#include <limitcounter/error.hpp>
#include <limitcounter/key_part.hpp>

namespace limitcounter::detail {
namespace {

[[noreturn]] void unexpected(std::string_view what, const Reply& reply) {
  throw Error(errc::protocol_error,
              "unexpected " + std::string(what) + " reply " + reply.debug_string(),
              Outcome::unknown);
}

// Unknown, or begun but not every chunk stored: either way nothing can be grabbed or closed.
[[noreturn]] void not_found(std::string_view status, std::string_view packet_id) {
  throw Error(errc::not_found,
              "red packet \"" + std::string(packet_id) + "\"" +
                  (status == "not_ready" ? " is not completely created (repeat the create with "
                                           "the same amounts and options to finish it)"
                                         : " does not exist"),
              Outcome::failed);
}

void validate_display_field(std::string_view what, std::string_view value) {
  if (value.size() > RedPacketPool::max_display_bytes) {
    throw Error(errc::invalid_argument,
                "red packet " + std::string(what) + " of " + std::to_string(value.size()) +
                    " bytes is longer than " + std::to_string(RedPacketPool::max_display_bytes) +
                    " bytes");
  }
  validate_display_text("red packet " + std::string(what), value);
}

} // namespace

std::string content_digest(const std::vector<std::int64_t>& amounts, std::string_view expires_ms,
                           int max_attempts) {
  std::uint64_t hash = 14695981039346656037ULL;
  const auto mix = [&hash](std::string_view text) {
    for (const char c : text) {
      hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    }
    hash = (hash ^ '|') * 1099511628211ULL; // separates values: "1","23" differs from "12","3"
  };
  mix(std::to_string(amounts.size()));
  mix(expires_ms);
  mix(std::to_string(max_attempts));
  for (const std::int64_t amount : amounts) {
    mix(std::to_string(amount));
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  return hex;
}

void validate_display(const UserDisplay& display) {
  validate_display_field("nickname", display.nickname);
  validate_display_field("avatar URL", display.avatar_url);
}

std::string encode_display(const UserDisplay& display) {
  if (display.nickname.empty() && display.avatar_url.empty()) {
    return {};
  }
  return std::to_string(display.nickname.size()) + ":" + display.nickname + display.avatar_url;
}

UserDisplay decode_display(std::string_view encoded) {
  if (encoded.empty()) {
    return {};
  }
  const auto cut = encoded.find(':');
  std::size_t length = 0;
  const char* end = encoded.data() + (cut == std::string_view::npos ? 0 : cut);
  const auto parsed = std::from_chars(encoded.data(), end, length);
  if (cut == std::string_view::npos || parsed.ec != std::errc{} || parsed.ptr != end ||
      length > encoded.size() - cut - 1) {
    throw Error(errc::protocol_error, "malformed red packet display " + quote_for_message(encoded),
                Outcome::unknown);
  }
  return {std::string(encoded.substr(cut + 1, length)),
          std::string(encoded.substr(cut + 1 + length))};
}

GrabResult decode_grab(const Reply& reply, std::string_view packet_id) {
  const std::string& status = reply.at(0).as_string();
  GrabResult result;
  if (status == "granted" || status == "already") { // "already": the user had won before
    result.status = GrabResult::Status::granted;
    result.replayed = status == "already";
    result.amount = reply.at(1).to_int64();
  } else if (status == "sold_out") {
    result.status = GrabResult::Status::sold_out;
  } else if (status == "expired") {
    result.status = GrabResult::Status::expired;
  } else if (status == "too_many_attempts") {
    result.status = GrabResult::Status::too_many_attempts;
  } else if (status == "unknown" || status == "not_ready") {
    not_found(status, packet_id);
  } else {
    unexpected("grab", reply);
  }
  return result;
}

CloseResult decode_close(const Reply& reply, std::string_view packet_id) {
  const std::string& status = reply.at(0).as_string();
  if (status == "unknown" || status == "not_ready") {
    not_found(status, packet_id);
  }
  if (status != "closed" && status != "already") {
    unexpected("close", reply);
  }
  CloseResult result;
  result.closed_now = status == "closed";
  result.replayed = !result.closed_now;
  result.leftover = reply.at(1).to_int64();
  result.packets_left = reply.at(2).to_int64();
  return result;
}

std::vector<PayoutTask> decode_take(const Reply& reply, std::uint32_t partition) {
  constexpr std::size_t fields = 5;
  const auto& items = reply.as_array();
  if (items.size() % fields != 0) {
    unexpected("take", reply);
  }
  std::vector<PayoutTask> tasks;
  tasks.reserve(items.size() / fields);
  for (std::size_t i = 0; i < items.size(); i += fields) {
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
    UserDisplay display = decode_display(items[i + 4].as_string());
    task.nickname = std::move(display.nickname);
    task.avatar_url = std::move(display.avatar_url);
    task.partition = partition;
    tasks.push_back(std::move(task));
  }
  return tasks;
}

} // namespace limitcounter::detail
