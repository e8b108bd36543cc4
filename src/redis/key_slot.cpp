#include "redis/key_slot.hpp"

#include <limitcounter/keys.hpp>

namespace limitcounter::detail {

std::string_view hash_tag(std::string_view key) noexcept {
  const auto open = key.find('{');
  if (open == std::string_view::npos) {
    return key;
  }
  const auto close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) {
    return key;
  }
  return key.substr(open + 1, close - open - 1);
}

std::uint16_t key_slot(std::string_view key) noexcept {
  return static_cast<std::uint16_t>(crc16(hash_tag(key)) % cluster_slots);
}

} // namespace limitcounter::detail
