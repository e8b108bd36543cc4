#pragma once
// Where the `redis` suites run: the private redis-server, or, with
// LIMITCOUNTER_TEST_TOPOLOGY=cluster, the private Redis Cluster (label `cluster`).

#include <string>
#include <vector>

#include <limitcounter/redis.hpp>

namespace limitcounter::testing {

/// True when the suites run against the shared cluster.
bool on_cluster();

/// Options for the shared server or the shared cluster, whichever this run uses.
RedisOptions test_options();

/// A client of each master of the topology this run uses: the shared server, or each master
/// of the shared cluster (for the per-node commands: KEYS, FUNCTION LIST).
std::vector<Redis> master_clients();

/// The keys matching `pattern` on every node (KEYS is a per-node command), sorted.
std::vector<std::string> keys_matching(const std::string& pattern);

} // namespace limitcounter::testing
