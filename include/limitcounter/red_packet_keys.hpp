#pragma once
// Keys of the red packets. A packet's keys share the hash tag of its payout-queue
// partition, `{q<N>}`, so that one script can pop a packet and queue its payout.

#include <cstdint>
#include <string>
#include <string_view>

#include <limitcounter/keys.hpp>

namespace limitcounter {

/// `<prefix>{q<N>}:p:<packet>:meta|list|drawn|attempts|paid` for a packet, and
/// `<prefix>{q<N>}:payout:ready|inflight|tasks|dead` and `<prefix>{q<N>}:packets` for a
/// partition N in [0, partitions). Default prefix `rp:`.
class RedPacketKeys : public PartitionedKeys {
public:
  /// The prefix when none is given.
  static constexpr std::string_view default_prefix = "rp:";

  /// Throws `Error` (invalid_argument) for a bad prefix or a partition count outside 1..1024.
  RedPacketKeys(std::string prefix, std::uint32_t partitions)
      : PartitionedKeys(std::move(prefix), partitions, 'q') {}

  /// A key of the packet; `part` is meta, list, drawn, attempts or paid.
  std::string packet(std::string_view packet, std::string_view part) const {
    std::string rest = ":p:";
    rest.append(packet).append(1, ':').append(part);
    return key(partition_of(packet), rest);
  }
  /// A key of a partition's payout queue; `part` is ready, inflight, tasks or dead.
  std::string payout(std::uint32_t partition, std::string_view part) const {
    return key(partition, std::string(":payout:").append(part));
  }
  /// The partition's index of open packets, scored by expiry.
  std::string packets(std::uint32_t partition) const { return key(partition, ":packets"); }
};

} // namespace limitcounter
