#pragma once
// The cluster router's state: which node serves each slot, learnt from CLUSTER SLOTS and
// corrected by MOVED, and the seeds to ask first. Pure logic, not thread-safe (the caller
// locks): unit-tested without a server. The I/O (asking a node, following ASK) is in
// redis.cpp.

#include <array>
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redis/cluster_protocol.hpp"
#include "redis/key_slot.hpp"

namespace limitcounter::detail {

/// A node's address.
struct Endpoint {
  std::string host;
  int port = 0;
  bool operator==(const Endpoint& other) const { return host == other.host && port == other.port; }
};

/// A cluster seed (or a sentinel: `what` names which, for the message) "host:port" or
/// "[v6]:port" (port 1 to 65535). Throws Error (invalid_argument) naming the seed for anything
/// else: no port, an empty host, a port that is not a number.
Endpoint parse_seed(std::string_view seed, std::string_view what = "Redis cluster seed");

/// The argument a cluster routes `argv` by (its first key), or nullopt for a command without
/// keys (any node serves it). argv[1] for most commands (GET, SET, HGET, XADD, ...); the key
/// after STREAMS for XREAD/XREADGROUP (argv[1] is an option such as BLOCK); the first key of
/// EVAL/EVALSHA/FCALL (and _RO) when numkeys > 0; argv[2] for MEMORY USAGE, OBJECT and XINFO;
/// none for server commands (PING, INFO, SCRIPT, CLIENT, CONFIG, CLUSTER, KEYS, ...).
std::optional<std::string_view> routing_key(const std::vector<std::string>& argv);

class SlotMap {
public:
  using Clock = std::chrono::steady_clock;
  /// How long a slot map read from CLUSTER SLOTS is trusted before it is read again.
  static constexpr std::chrono::seconds refresh_every{30};

  /// The index of `endpoint`, added if new. Indexes are stable: nodes are never removed.
  std::size_t node_index(const Endpoint& endpoint);
  const Endpoint& node(std::size_t index) const { return nodes_[index]; }
  std::size_t node_count() const noexcept { return nodes_.size(); }

  /// The node serving `slot`, if known. A call without keys (slot < 0) goes to slot 0's node.
  std::optional<std::size_t> owner(int slot) const;
  /// One slot of each node that serves a slot (its first), in slot order: a call routed to
  /// each reaches every master once.
  std::vector<int> one_slot_per_node() const;
  /// Whether the map should be read again before routing at `now`: never read, older than
  /// `refresh_every`, or contradicted by a MOVED.
  bool stale(Clock::time_point now) const { return now >= fresh_until_; }

  /// Writes the owners of the slot ranges a CLUSTER SLOTS reply read at `now` lists. A slot it
  /// does not list keeps the owner known before (its node then answers CLUSTERDOWN or MOVED, and
  /// the call is retried or refused within its budget). An empty reply changes nothing and
  /// returns false.
  bool assign(const std::vector<SlotRange>& ranges, Clock::time_point now);
  /// MOVED: the slot now lives on the redirect's node, and the rest of the map may be out of
  /// date too, so it is read again on the next call. Returns the node's index.
  std::size_t moved(const Redirect& redirect);

private:
  std::vector<Endpoint> nodes_;
  std::array<int, cluster_slots> owners_ = filled_with_unknown();
  Clock::time_point fresh_until_{};

  static std::array<int, cluster_slots> filled_with_unknown() {
    std::array<int, cluster_slots> owners{};
    owners.fill(-1);
    return owners;
  }
};

} // namespace limitcounter::detail
