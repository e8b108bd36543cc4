#include "support/redis_cluster.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include <unistd.h>

namespace limitcounter::testing {
namespace {

Reply run(const RedisServer& node, const std::vector<std::string>& argv) {
  RedisOptions options = node.options();
  options.pool_size = 1;
  return Redis(options).command(argv);
}

std::string node_id(const RedisServer& node) { return run(node, {"CLUSTER", "MYID"}).as_string(); }

std::string replication(const RedisServer& node) {
  return run(node, {"INFO", "replication"}).as_string();
}

bool is_master(const RedisServer& node) {
  return replication(node).find("role:master") != std::string::npos;
}

} // namespace

RedisCluster::RedisCluster(int masters, int replicas_per_master)
    : RedisCluster(masters, replicas_per_master, std::optional<TlsPort>()) {}

RedisCluster::RedisCluster(int masters, int replicas_per_master, const TlsPort& tls)
    : RedisCluster(masters, replicas_per_master, std::optional<TlsPort>(tls)) {}

RedisCluster::RedisCluster(int masters, int replicas_per_master,
                           const std::optional<TlsPort>& tls) {
  static int clusters = 0;
  directory_ =
      (std::filesystem::temp_directory_path() /
       ("limitcounter-cluster-" + std::to_string(getpid()) + "-" + std::to_string(++clusters)))
          .string();
  std::filesystem::create_directories(directory_);
  const int total = masters * (1 + replicas_per_master);
  std::string create = "redis-cli --cluster create";
  if (tls) {
    create = "redis-cli --tls --cacert '" + tls->ca_file + "' --cert '" + tls->cert_file +
             "' --key '" + tls->key_file + "' --cluster create";
  }
  for (int i = 0; i < total; ++i) {
    std::vector<std::string> args{"--cluster-enabled", "yes", "--cluster-config-file",
                                  directory_ + "/nodes-" + std::to_string(i) + ".conf", "--dir",
                                  directory_, "--cluster-node-timeout", "2000",
                                  // a replica's first sync starts at once (not after 5 s)
                                  "--repl-diskless-sync-delay", "0"};
    if (tls) {
      args.insert(args.end(), {"--tls-cluster", "yes"});
      nodes_.push_back(std::make_unique<RedisServer>(std::move(args), *tls));
    } else {
      nodes_.push_back(std::make_unique<RedisServer>(std::move(args)));
    }
    create += " 127.0.0.1:" + std::to_string(nodes_.back()->port());
  }
  create += " --cluster-replicas " + std::to_string(replicas_per_master) + " --cluster-yes >" +
            directory_ + "/create.log 2>&1";
  if (std::system(create.c_str()) != 0) {
    throw std::runtime_error("redis-cli --cluster create failed; see " + directory_ +
                             "/create.log");
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (const auto& node : nodes_) {
    while (run(*node, {"CLUSTER", "INFO"}).as_string().find("cluster_state:ok") ==
           std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("the cluster did not reach cluster_state:ok");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  // Every replica has its master's data before a test relies on it (a failover test does).
  const auto linked_replicas = [&] {
    int linked = 0;
    for (const auto& node : nodes_) {
      const std::string replication = run(*node, {"INFO", "replication"}).as_string();
      linked += replication.find("master_link_status:up") != std::string::npos ? 1 : 0;
    }
    return linked;
  };
  while (linked_replicas() < masters * replicas_per_master) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("a replica of the cluster did not finish its first sync");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

RedisCluster::~RedisCluster() {
  nodes_.clear(); // stops every node by its pid
  std::error_code ignored;
  std::filesystem::remove_all(directory_, ignored);
}

RedisOptions RedisCluster::options() const {
  RedisOptions options = nodes_.front()->options();
  for (const auto& node : nodes_) {
    options.cluster_seeds.push_back("127.0.0.1:" + std::to_string(node->port()));
  }
  return options;
}

std::vector<RedisServer*> RedisCluster::nodes() const {
  std::vector<RedisServer*> out;
  for (const auto& node : nodes_) {
    out.push_back(node.get());
  }
  return out;
}

std::vector<RedisServer*> RedisCluster::masters() const {
  std::vector<RedisServer*> out;
  for (const auto& node : nodes_) {
    if (node->pid() > 0 && is_master(*node)) {
      out.push_back(node.get());
    }
  }
  return out;
}

RedisServer& RedisCluster::owner_of(int slot) const {
  const auto live =
      std::find_if(nodes_.begin(), nodes_.end(), [](const auto& node) { return node->pid() > 0; });
  if (live == nodes_.end()) {
    throw std::runtime_error("no node of the cluster is running");
  }
  const Reply slots = run(**live, {"CLUSTER", "SLOTS"});
  for (const Reply& range : slots.as_array()) {
    if (range.at(0).as_integer() <= slot && slot <= range.at(1).as_integer()) {
      const auto port = range.at(2).at(1).as_integer();
      for (const auto& node : nodes_) {
        if (node->port() == port) {
          return *node;
        }
      }
    }
  }
  throw std::runtime_error("no node serves slot " + std::to_string(slot));
}

void RedisCluster::migrate_slot(int slot, RedisServer& target) const {
  RedisServer& source = owner_of(slot);
  begin_migration(slot, source, target);
  move_keys(slot, source, target);
  finish_migration(slot, target);
}

void RedisCluster::begin_migration(int slot, RedisServer& source, RedisServer& target) const {
  const std::string slot_text = std::to_string(slot);
  run(target, {"CLUSTER", "SETSLOT", slot_text, "IMPORTING", node_id(source)});
  run(source, {"CLUSTER", "SETSLOT", slot_text, "MIGRATING", node_id(target)});
}

void RedisCluster::move_keys(int slot, RedisServer& source, RedisServer& target) const {
  for (;;) {
    const std::vector<std::string> keys = keys_in_slot(slot, source);
    if (keys.empty()) {
      break;
    }
    move_some_keys(keys, source, target);
  }
}

void RedisCluster::load_scripts() const {
  for (const auto& node : nodes_) {
    RedisOptions options = node->options();
    options.pool_size = 1;
    Redis redis(options);
    load_every_script(redis);
  }
}

std::vector<std::string> RedisCluster::keys_in_slot(int slot, RedisServer& node) const {
  const Reply found = run(node, {"CLUSTER", "GETKEYSINSLOT", std::to_string(slot), "100"});
  std::vector<std::string> keys;
  for (const Reply& key : found.as_array()) {
    keys.push_back(key.as_string());
  }
  return keys;
}

void RedisCluster::move_some_keys(const std::vector<std::string>& keys, RedisServer& source,
                                  RedisServer& target) const {
  std::vector<std::string> migrate{"MIGRATE", "127.0.0.1", std::to_string(target.port()), "", "0",
                                   "5000",    "KEYS"};
  migrate.insert(migrate.end(), keys.begin(), keys.end());
  const Reply moved = run(source, migrate);
  if (moved.is_error()) {
    throw std::runtime_error("MIGRATE failed: " + moved.as_string());
  }
}

void RedisCluster::finish_migration(int slot, RedisServer& target) const {
  const std::string target_id = node_id(target);
  for (RedisServer* node : masters()) { // a replica refuses SETSLOT and learns it by gossip
    run(*node, {"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", target_id});
  }
}

RedisServer& RedisCluster::fail_over(RedisServer& master) const {
  const std::string master_port = "master_port:" + std::to_string(master.port()) + "\r";
  const auto replica = std::find_if(nodes_.begin(), nodes_.end(), [&](const auto& node) {
    return node->pid() > 0 && replication(*node).find(master_port) != std::string::npos;
  });
  if (replica == nodes_.end()) {
    throw std::runtime_error("no replica of the master on port " + std::to_string(master.port()));
  }
  const auto promoted = [&] {
    if (!is_master(**replica) || is_master(master)) {
      return false;
    }
    // no master's map of the slots names the old master any more (gossip reaches them in turn)
    for (RedisServer* node : masters()) {
      const Reply slots = run(*node, {"CLUSTER", "SLOTS"});
      for (const Reply& range : slots.as_array()) {
        if (range.at(2).at(1).as_integer() == master.port()) {
          return false;
        }
      }
    }
    return true;
  };
  // A manual failover that the replica could not finish in time (a loaded machine) is aborted by
  // the cluster: ask again.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (std::chrono::steady_clock::now() < deadline) {
    run(**replica, {"CLUSTER", "FAILOVER"});
    const auto attempt_end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < attempt_end) {
      if (promoted()) {
        return **replica;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  throw std::runtime_error("the replica on port " + std::to_string((*replica)->port()) +
                           " was not promoted within a minute");
}

RedisCluster& shared_cluster() {
  static RedisCluster cluster;
  return cluster;
}

} // namespace limitcounter::testing
