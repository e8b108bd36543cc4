#pragma once
// The Redis Cluster comparison of scripts/bench.sh --cluster N: the same consume scenarios on a
// standalone server and on a cluster in one run, and the server cost of a decision on each
// master of the cluster.

#include <chrono>
#include <string>

namespace bench {

/// Runs the cluster scenarios and prints their tables. `standalone_uri` is a `redis://` URI,
/// `cluster_uri` a `redis-cluster://` URI whose seeds are all the masters (no replicas).
void run_cluster_comparison(const std::string& standalone_uri, const std::string& cluster_uri,
                            std::chrono::milliseconds duration, int threads);

} // namespace bench
