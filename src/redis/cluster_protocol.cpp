#include "redis/cluster_protocol.hpp"

#include <charconv>

#include <limitcounter/error.hpp>

#include "redis/key_slot.hpp"

namespace limitcounter::detail {
namespace {

bool parse_int(std::string_view text, int& value) {
  const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
  return result.ec == std::errc{} && result.ptr == text.data() + text.size();
}

} // namespace

std::vector<SlotRange> parse_cluster_slots(const Reply& reply, std::string_view asked_host) {
  std::vector<SlotRange> ranges;
  for (const Reply& entry : reply.as_array()) {
    const auto first = entry.at(0).as_integer();
    const auto last = entry.at(1).as_integer();
    const Reply& master = entry.at(2);
    if (first < 0 || last < first || last >= cluster_slots) {
      throw Error(errc::protocol_error, "CLUSTER SLOTS has a bad range " + entry.debug_string(),
                  Outcome::failed);
    }
    const std::string& host = master.at(0).as_string();
    ranges.push_back({static_cast<std::uint16_t>(first), static_cast<std::uint16_t>(last),
                      host.empty() ? std::string(asked_host) : host,
                      static_cast<int>(master.at(1).as_integer())});
  }
  return ranges;
}

std::optional<Redirect> parse_redirect(std::string_view error) {
  Redirect redirect;
  if (error.substr(0, 6) == "MOVED ") {
    error.remove_prefix(6);
  } else if (error.substr(0, 4) == "ASK ") {
    redirect.ask = true;
    error.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const auto space = error.find(' ');
  const auto colon = error.rfind(':');
  int slot = 0;
  if (space == std::string_view::npos || colon == std::string_view::npos || colon < space ||
      !parse_int(error.substr(0, space), slot) || slot < 0 || slot >= cluster_slots ||
      !parse_int(error.substr(colon + 1), redirect.port)) {
    return std::nullopt;
  }
  redirect.slot = static_cast<std::uint16_t>(slot);
  redirect.host = std::string(error.substr(space + 1, colon - space - 1));
  return redirect;
}

} // namespace limitcounter::detail
