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

std::vector<Redis> master_clients() {
  std::vector<Redis> masters;
  if (on_cluster()) {
    for (const RedisServer* node : shared_cluster().masters()) {
      masters.emplace_back(node->options());
    }
  } else {
    masters.emplace_back(shared_server().options());
  }
  return masters;
}

std::vector<std::string> keys_matching(const std::string& pattern) {
  std::vector<std::string> keys;
  for (Redis& master : master_clients()) {
    const Reply reply = master.command({"KEYS", pattern});
    for (const Reply& key : reply.as_array()) {
      keys.push_back(key.as_string());
    }
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

} // namespace limitcounter::testing
