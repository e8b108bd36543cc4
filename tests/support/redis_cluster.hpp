#pragma once
// A private Redis Cluster for tests: masters (and replicas if asked) on free loopback
// ports, joined with `redis-cli --cluster create`, stopped by their pids.

#include <memory>
#include <string>
#include <vector>

#include "support/redis_server.hpp"

namespace limitcounter::testing {

class RedisCluster {
public:
  /// Starts `masters` masters with `replicas_per_master` replicas each, creates the cluster
  /// and returns once every node reports cluster_state:ok. Throws std::runtime_error.
  explicit RedisCluster(int masters = 3, int replicas_per_master = 0);
  /// The same with every node on its TLS port only, the cluster bus over TLS too
  /// (`tls-cluster yes`); options() then connect over TLS.
  RedisCluster(int masters, int replicas_per_master, const TlsPort& tls);
  ~RedisCluster();
  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;

  /// Options with every node as a seed and generous test timeouts.
  RedisOptions options() const;
  std::vector<RedisServer*> nodes() const;
  /// The running nodes that are masters now (INFO replication).
  std::vector<RedisServer*> masters() const;
  /// The node serving `slot` now, according to CLUSTER SLOTS.
  RedisServer& owner_of(int slot) const;
  /// Moves `slot` with its keys from its owner to `target`, the way redis-cli reshards:
  /// IMPORTING, MIGRATING, MIGRATE in batches, then SETSLOT NODE on every master.
  void migrate_slot(int slot, RedisServer& target) const;
  /// The steps of `migrate_slot` one by one, to stop half way: mark the slot as moving,
  /// move its keys, and hand it over on every master.
  void begin_migration(int slot, RedisServer& source, RedisServer& target) const;
  void move_keys(int slot, RedisServer& source, RedisServer& target) const;
  /// Loads every embedded script on every node (`load_every_script`).
  void load_scripts() const;
  /// Up to 100 keys of `slot` that `node` holds (CLUSTER GETKEYSINSLOT).
  std::vector<std::string> keys_in_slot(int slot, RedisServer& node) const;
  /// Moves just `keys` (one MIGRATE ... KEYS batch), to half move a slot key by key.
  void move_some_keys(const std::vector<std::string>& keys, RedisServer& source,
                      RedisServer& target) const;
  void finish_migration(int slot, RedisServer& target) const;
  /// Has a replica of `master` take its place with CLUSTER FAILOVER, the coordinated kind (the
  /// master holds writes until the replica has caught up, so no acknowledged write is lost), and
  /// returns the promoted replica once both report their new roles and CLUSTER SLOTS names it.
  /// Throws std::runtime_error (no replica, or no promotion within a minute).
  RedisServer& fail_over(RedisServer& master) const;

private:
  RedisCluster(int masters, int replicas_per_master, const std::optional<TlsPort>& tls);
  std::string directory_;
  std::vector<std::unique_ptr<RedisServer>> nodes_;
};

/// The cluster shared by all cluster tests of one binary (3 masters).
RedisCluster& shared_cluster();

} // namespace limitcounter::testing
