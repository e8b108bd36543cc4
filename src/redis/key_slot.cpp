#include "redis/key_slot.hpp"

#include <array>

namespace limitcounter::detail {
namespace {

// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, as Redis Cluster specifies.
constexpr std::array<std::uint16_t, 256> make_crc_table() {
  std::array<std::uint16_t, 256> table{};
  for (unsigned byte = 0; byte < 256; ++byte) {
    auto crc = static_cast<std::uint16_t>(byte << 8U);
    for (int bit = 0; bit < 8; ++bit) {
      crc = static_cast<std::uint16_t>((crc & 0x8000U) != 0 ? (crc << 1U) ^ 0x1021U : crc << 1U);
    }
    table[byte] = crc;
  }
  return table;
}

constexpr auto crc_table = make_crc_table();

std::uint16_t crc16(std::string_view data) noexcept {
  std::uint16_t crc = 0;
  for (const char c : data) {
    const auto index = static_cast<std::uint8_t>((crc >> 8U) ^ static_cast<std::uint8_t>(c));
    crc = static_cast<std::uint16_t>((crc << 8U) ^ crc_table[index]);
  }
  return crc;
}

} // namespace

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
