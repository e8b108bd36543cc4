#pragma once
// Redis Cluster key slots: CRC16 (XMODEM) of the key, or of its hash tag, modulo 16384.

#include <cstdint>
#include <string_view>

namespace limitcounter::detail {

inline constexpr std::uint16_t cluster_slots = 16384;

/// The part of `key` that decides its slot: the text between the first '{' and the next
/// '}' when that is non-empty, else the whole key (the rule Redis Cluster applies).
std::string_view hash_tag(std::string_view key) noexcept;

/// The cluster slot of `key`, in [0, 16384).
std::uint16_t key_slot(std::string_view key) noexcept;

} // namespace limitcounter::detail
