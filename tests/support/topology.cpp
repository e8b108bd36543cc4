#include "support/topology.hpp"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"

namespace limitcounter::testing {

bool on_cluster() {
  const char* topology = std::getenv("LIMITCOUNTER_TEST_TOPOLOGY");
  return topology != nullptr && std::string_view(topology) == "cluster";
}

RedisOptions test_options() {
  return on_cluster() ? shared_cluster().options() : shared_server().options();
}

std::vector<std::string> keys_matching(const std::string& pattern) {
  std::vector<RedisOptions> nodes;
  if (on_cluster()) {
    for (const RedisServer* node : shared_cluster().nodes()) {
      nodes.push_back(node->options());
    }
  } else {
    nodes.push_back(shared_server().options());
  }
  std::vector<std::string> keys;
  for (const auto& options : nodes) {
    const Reply reply = Redis(options).command({"KEYS", pattern});
    for (const Reply& key : reply.as_array()) {
      keys.push_back(key.as_string());
    }
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

} // namespace limitcounter::testing
