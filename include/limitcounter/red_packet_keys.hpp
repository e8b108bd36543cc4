#pragma once
// Keys of the red packets. A packet's keys share the hash tag of its payout-queue
// partition, `{q<N>}`, so that one script can pop a packet and queue its payout.

#include <cstdint>
#include <string>
#include <string_view>

#include <limitcounter/keys.hpp>

namespace limitcounter {

/// FNV-1a 64 of `text`: a stable hash for partitioning (the same on every host).
constexpr std::uint64_t stable_hash(std::string_view text) noexcept {
  std::uint64_t hash = 14695981039346656037ULL;
  for (const char c : text) {
    hash ^= static_cast<std::uint8_t>(c);
    hash *= 1099511628211ULL;
  }
  return hash;
}

/// `<prefix>{q<N>}:p:<packet>:meta|list|drawn|attempts|paid` for a packet, and
/// `<prefix>{q<N>}:payout:ready|inflight|tasks|dead` and `<prefix>{q<N>}:packets` for a
/// partition N in [0, partitions). Default prefix `rp:`.
class RedPacketKeys {
public:
  static constexpr std::string_view default_prefix = "rp:";

  /// Throws `Error` (invalid_argument) for a bad prefix or a partition count outside 1..1024.
  RedPacketKeys(std::string prefix, std::uint32_t partitions);

  std::uint32_t partitions() const noexcept { return partitions_; }
  /// The partition of a packet: stable_hash(packet) % partitions.
  std::uint32_t partition_of(std::string_view packet) const noexcept {
    return static_cast<std::uint32_t>(stable_hash(packet) % partitions_);
  }

  /// A key of the packet; `part` is meta, list, drawn, attempts or paid.
  std::string packet(std::string_view packet, std::string_view part) const {
    std::string rest = ":p:";
    rest.append(packet).append(1, ':').append(part);
    return tagged_key(prefix_, tag(partition_of(packet)), rest);
  }
  /// A key of a partition's payout queue; `part` is ready, inflight, tasks or dead.
  std::string payout(std::uint32_t partition, std::string_view part) const {
    return tagged_key(prefix_, tag(partition), std::string(":payout:").append(part));
  }
  /// The partition's index of open packets, scored by expiry.
  std::string packets(std::uint32_t partition) const {
    return tagged_key(prefix_, tag(partition), ":packets");
  }

private:
  static std::string tag(std::uint32_t partition) { return "q" + std::to_string(partition); }

  std::string prefix_;
  std::uint32_t partitions_;
};

} // namespace limitcounter
