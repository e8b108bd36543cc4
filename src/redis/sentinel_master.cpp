#include "redis/sentinel_master.hpp"

#include <limitcounter/error.hpp>
#include <limitcounter/reply.hpp>

namespace limitcounter::detail {

Rediscovery rediscovery_step(bool master_known, bool failed_is_current,
                             RetryPolicy::Clock::duration since_asked,
                             std::chrono::milliseconds recheck) {
  if (!failed_is_current) {
    return Rediscovery::moved_already;
  }
  if (master_known && since_asked < recheck) {
    return Rediscovery::too_soon;
  }
  return Rediscovery::ask;
}

SentinelMaster::SentinelMaster(RedisOptions options)
    : options_(std::move(options)), sentinels_(options_) {}

ConnectionPool& SentinelMaster::pool(const RetryPolicy& policy) {
  ConnectionPool* master = master_.load();
  if (master == nullptr || suspect_.load() == master) {
    rediscover(master, policy);
    master = master_.load();
  }
  return *master;
}

bool SentinelMaster::rediscover(ConnectionPool* failed, const RetryPolicy& policy) {
  const std::lock_guard<std::mutex> lock(mutex_);
  ConnectionPool* current = master_.load();
  const auto now = RetryPolicy::Clock::now();
  switch (rediscovery_step(current != nullptr, current == failed, now - asked_at_,
                           options_.sentinel_recheck)) {
  case Rediscovery::moved_already: return true;
  case Rediscovery::too_soon: return false;
  case Rediscovery::ask: break;
  }
  asked_at_ = now;
  suspect_.store(nullptr);
  try {
    const Endpoint address = sentinels_.master(policy, [&](const Endpoint& endpoint) {
      return refusal_as_master(pool_of_locked(endpoint));
    });
    ConnectionPool& chosen = pool_of_locked(address);
    if (&chosen == current) {
      return false;
    }
    chosen.reinstate();
    master_.store(&chosen);
    if (current != nullptr) {
      current->retire();
    }
    return true;
  } catch (const Error&) {
    if (current == nullptr) {
      throw;
    }
    return false;
  }
}

std::optional<std::string> SentinelMaster::refusal_as_master(ConnectionPool& pool) {
  try {
    auto lease = pool.acquire();
    const Reply role = lease->run({"ROLE"});
    if (role_is_master(role)) {
      return std::nullopt;
    }
    return "answers ROLE " + role_name(role);
  } catch (const Error& e) {
    return std::string("cannot be used: ") + e.what();
  }
}

ConnectionPool& SentinelMaster::pool_of_locked(const Endpoint& endpoint) {
  for (const auto& [known, pool] : pools_) {
    if (known == endpoint) {
      return *pool;
    }
  }
  pools_.emplace_back(endpoint,
                      std::make_unique<ConnectionPool>(options_, endpoint.host, endpoint.port));
  return *pools_.back().second;
}

} // namespace limitcounter::detail
