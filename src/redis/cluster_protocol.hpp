#pragma once
// Redis Cluster replies the router reads: the slot map and redirections. Pure; unit-tested.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <limitcounter/reply.hpp>

namespace limitcounter::detail {

/// Slots [first, last] served by the master at host:port.
struct SlotRange {
  std::uint16_t first = 0;
  std::uint16_t last = 0;
  std::string host;
  int port = 0;
};

/// The masters of a `CLUSTER SLOTS` reply sent by the node at `asked_host`. A master whose host
/// is empty is that node's address (Redis sends an empty endpoint for "the address you asked",
/// e.g. a node that never learned its own IP). Throws Error(protocol_error) for another shape.
std::vector<SlotRange> parse_cluster_slots(const Reply& reply, std::string_view asked_host);

/// A MOVED or ASK error reply ("MOVED 3999 127.0.0.1:6381"). An empty host (":6381") means
/// the host of the node that answered; the caller fills it in.
struct Redirect {
  bool ask = false; ///< ASK: this command only, after ASKING; MOVED: the slot has moved for good
  std::uint16_t slot = 0;
  std::string host;
  int port = 0;
};

/// The redirection in an error reply's text, if it is one.
std::optional<Redirect> parse_redirect(std::string_view error);

} // namespace limitcounter::detail
