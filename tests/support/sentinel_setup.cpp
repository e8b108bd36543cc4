#include "support/sentinel_setup.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include <limitcounter/error.hpp>

namespace limitcounter::testing {
namespace {

using namespace std::chrono_literals;

// The strings of an array reply and of the arrays in it, in order.
void flatten(const redisReply* array, std::vector<std::string>& out) {
  for (std::size_t i = 0; i < array->elements; ++i) {
    const redisReply* element = array->element[i];
    if (element->type == REDIS_REPLY_ARRAY) {
      flatten(element, out);
    } else if (element->type == REDIS_REPLY_STRING) {
      out.emplace_back(element->str, element->len);
    }
  }
}

// A sentinel is no data server (limitcounter::Redis would refuse it at its server check):
// talk to it with plain hiredis. Returns the reply's strings (an array's, or the one string);
// an error reply as one string starting with "-".
std::vector<std::string> sentinel_command(int port, const std::vector<std::string>& argv) {
  const timeval timeout{2, 0};
  redisContext* context = redisConnectWithTimeout("127.0.0.1", port, timeout);
  if (context == nullptr || context->err != 0) {
    if (context != nullptr) {
      redisFree(context);
    }
    throw std::runtime_error("cannot connect to the sentinel on port " + std::to_string(port));
  }
  redisSetTimeout(context, timeout);
  std::vector<const char*> args;
  std::vector<std::size_t> lengths;
  for (const auto& arg : argv) {
    args.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  auto* reply = static_cast<redisReply*>(
      redisCommandArgv(context, static_cast<int>(args.size()), args.data(), lengths.data()));
  std::vector<std::string> out;
  if (reply != nullptr) {
    if (reply->type == REDIS_REPLY_ARRAY) {
      flatten(reply, out);
    } else if (reply->type == REDIS_REPLY_ERROR) {
      out.push_back("-" + std::string(reply->str, reply->len));
    } else if (reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_STATUS) {
      out.emplace_back(reply->str, reply->len);
    }
    freeReplyObject(reply);
  }
  redisFree(context);
  if (reply == nullptr) {
    throw std::runtime_error("the sentinel on port " + std::to_string(port) + " did not answer");
  }
  return out;
}

// Polls `condition` every 50 ms for up to 30 s (a loaded 2-core machine); throws naming `what`.
template <typename Condition> void wait_for(const std::string& what, Condition&& condition) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("sentinel setup: timed out waiting for " + what);
    }
    std::this_thread::sleep_for(50ms);
  }
}

// The number after "<field>:" in an INFO text, or -1.
long long info_number(const std::string& info, const std::string& field) {
  const auto at = info.find("\n" + field + ":");
  return at == std::string::npos ? -1 : std::atoll(info.c_str() + at + field.size() + 2);
}

std::string info_replication(const RedisServer& server) {
  return Redis(server.options()).command({"INFO", "replication"}).as_string();
}

} // namespace

SentinelSetup::SentinelSetup() {
  char pattern[] = "/tmp/limitcounter-sentinel.XXXXXX";
  if (mkdtemp(pattern) == nullptr) {
    throw std::runtime_error("mkdtemp failed");
  }
  dir_ = pattern;
  // Each server in a directory of its own: a replica's full sync writes dump.rdb there.
  for (const char* name : {"/master", "/replica"}) {
    mkdir((dir_ + name).c_str(), 0700);
  }
  servers_.push_back(
      std::make_unique<RedisServer>(std::vector<std::string>{"--dir", dir_ + "/master"}));
  const std::string master_port = std::to_string(first_master().port());
  servers_.push_back(std::make_unique<RedisServer>(std::vector<std::string>{
      "--dir", dir_ + "/replica", "--replicaof", "127.0.0.1", master_port}));
  for (int i = 0; i < 3; ++i) {
    const std::string config = dir_ + "/sentinel-" + std::to_string(i) + ".conf";
    std::ofstream(config) << "sentinel monitor " << master_name << " 127.0.0.1 " << master_port
                          << " 2\n"
                          << "sentinel down-after-milliseconds " << master_name << " 1000\n"
                          << "sentinel failover-timeout " << master_name << " 5000\n"
                          << "dir " << dir_ << "\n";
    sentinels_.push_back(
        std::make_unique<RedisServer>("redis-sentinel", config, std::vector<std::string>{}));
  }
  wait_for("the replica to be in sync", [&] {
    return info_replication(first_replica()).find("master_link_status:up") != std::string::npos;
  });
  const std::string replica = "127.0.0.1:" + std::to_string(first_replica().port());
  for (const auto& sentinel : sentinels_) {
    wait_for("every sentinel to know the replica", [&] {
      const auto replicas =
          sentinel_command(sentinel->port(), {"SENTINEL", "REPLICAS", master_name});
      return std::find(replicas.begin(), replicas.end(), replica) != replicas.end();
    });
  }
}

SentinelSetup::~SentinelSetup() {
  sentinels_.clear(); // stopped by pid (RedisServer's destructor)
  servers_.clear();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

RedisOptions SentinelSetup::options() const {
  RedisOptions options = servers_[0]->options(); // the generous test timeouts
  options.host.clear();
  options.port = 0;
  options.sentinels = sentinel_addresses();
  options.sentinel_master = master_name;
  return options;
}

std::vector<std::string> SentinelSetup::sentinel_addresses() const {
  std::vector<std::string> addresses;
  for (const auto& sentinel : sentinels_) {
    addresses.push_back("127.0.0.1:" + std::to_string(sentinel->port()));
  }
  return addresses;
}

int SentinelSetup::master_port_named_by(std::size_t index) const {
  const auto address = sentinel_command(sentinels_.at(index)->port(),
                                        {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", master_name});
  return address.size() == 2 ? std::atoi(address[1].c_str()) : -1;
}

std::string SentinelSetup::role(const RedisServer& server) {
  return Redis(server.options()).command({"ROLE"}).at(0).as_string();
}

void SentinelSetup::switchover() {
  RedisServer* old_master = role(first_master()) == "master" ? &first_master() : &first_replica();
  RedisServer* new_master = old_master == &first_master() ? &first_replica() : &first_master();
  Redis admin(old_master->options());
  // Long enough for the steps below on a loaded machine; released explicitly at the end.
  admin.command({"CLIENT", "PAUSE", "60000", "WRITE"});
  // A paused master sends its replicas nothing new (no PINGs either): equal offsets mean the
  // replica has every write the master acknowledged.
  wait_for("the replica to catch up", [&] {
    const long long master_offset =
        info_number(info_replication(*old_master), "master_repl_offset");
    return master_offset > 0 &&
           info_number(info_replication(*new_master), "slave_repl_offset") == master_offset;
  });
  wait_for("SENTINEL FAILOVER to start", [&] {
    const auto reply =
        sentinel_command(sentinels_[0]->port(), {"SENTINEL", "FAILOVER", master_name});
    return !reply.empty() && reply[0] == "OK";
  });
  wait_for("every sentinel to name the new master", [&] {
    for (std::size_t i = 0; i < sentinels_.size(); ++i) {
      if (master_port_named_by(i) != new_master->port()) {
        return false;
      }
    }
    return role(*new_master) == "master";
  });
  admin.command({"REPLICAOF", "127.0.0.1", std::to_string(new_master->port())});
  wait_for("the old master to be a replica", [&] { return role(*old_master) == "slave"; });
  admin.command({"CLIENT", "UNPAUSE"});
}

} // namespace limitcounter::testing
