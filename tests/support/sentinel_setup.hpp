#pragma once
// A private Redis Sentinel deployment for tests: a master, one replica (--replicaof) and three
// redis-sentinel processes monitoring the master with quorum 2, all on free loopback ports,
// stopped by their pids. Each sentinel has its own writable config file in a temporary
// directory, removed at the end.

#include <memory>
#include <string>
#include <vector>

#include <limitcounter/redis.hpp>

#include "support/redis_server.hpp"

namespace limitcounter::testing {

class SentinelSetup {
public:
  /// The name the sentinels monitor.
  static constexpr const char* master_name = "lcmaster";

  /// Starts everything and returns once every sentinel names the master and knows the
  /// replica, and the replica is in sync. Throws std::runtime_error otherwise.
  SentinelSetup();
  ~SentinelSetup();
  SentinelSetup(const SentinelSetup&) = delete;
  SentinelSetup& operator=(const SentinelSetup&) = delete;

  /// The first master, and the first replica (the master after `switchover`).
  RedisServer& first_master() { return *servers_[0]; }
  RedisServer& first_replica() { return *servers_[1]; }

  /// Options reaching the master through the sentinels, with generous test timeouts.
  RedisOptions options() const;
  /// "host:port" of each sentinel.
  std::vector<std::string> sentinel_addresses() const;

  /// The port sentinel `index` names as the master now.
  int master_port_named_by(std::size_t index) const;
  /// The first element of ROLE on `server` ("master", "slave").
  static std::string role(const RedisServer& server);

  /// A failover in which Redis loses no acknowledged write (see docs/CONNECTION.md, the "Sentinel"
  /// section): holds the writes of every client of the master (CLIENT PAUSE WRITE), waits
  /// until the replica has everything the master has (equal replication offsets), asks a
  /// sentinel for `SENTINEL FAILOVER`, waits until every sentinel names the replica and it
  /// answers ROLE master, makes the old master a replica of the new one (what the sentinels
  /// would do some seconds later), and only then lets the held writes go: on a replica they
  /// are refused with READONLY and never run. Throws std::runtime_error if a step times out.
  void switchover();

private:
  std::string dir_;
  std::vector<std::unique_ptr<RedisServer>> servers_;   // master, replica
  std::vector<std::unique_ptr<RedisServer>> sentinels_; // three
};

} // namespace limitcounter::testing
