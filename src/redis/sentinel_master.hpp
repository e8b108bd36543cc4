#pragma once
// The master a Redis Sentinel setup names, followed across failovers: which pool a call sends
// to, and when to ask the sentinels again. When to ask is a pure decision (rediscovery_step,
// unit-tested); SentinelMaster does the asking and keeps a pool per master address it used.

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <limitcounter/redis.hpp>

#include "redis/connection_pool.hpp"
#include "redis/retry_policy.hpp"
#include "redis/router.hpp"
#include "redis/sentinel.hpp"

namespace limitcounter::detail {

/// What a call that found its master unusable does about it (see rediscovery_step).
enum class Rediscovery {
  moved_already, ///< another call moved to another master meanwhile: send there
  too_soon,      ///< the sentinels answered less than `sentinel_recheck` ago: keep the master
  ask,           ///< ask the sentinels now
};

/// The decision of a call whose master failed (or of the first call: `master_known` false).
/// `failed_is_current`: the master it failed on is still the one in use; `since_asked`: the
/// time since the sentinels were last asked. The first call always asks; a failure on a master
/// another call already left is not asked about again; otherwise the sentinels are asked at most
/// once per `recheck` (while they still name the old master during a failover, every call would
/// ask them again).
Rediscovery rediscovery_step(bool master_known, bool failed_is_current,
                             RetryPolicy::Clock::duration since_asked,
                             std::chrono::milliseconds recheck);

/// The current master of `options.sentinel_master` and its pool. Thread-safe: one question to
/// the sentinels at a time; calls read the master without a lock.
class SentinelMaster {
public:
  /// Checks the options as SentinelClient does (throws Error(invalid_argument)); no I/O.
  explicit SentinelMaster(RedisOptions options);

  /// "master 'name' (sentinels a:1,b:2)", for messages.
  const std::string& description() const noexcept { return sentinels_.description(); }

  /// The pool of the master the sentinels name: asked on the first call, and again first when
  /// a failure made the current master a suspect (`suspect`). Throws Error(connect_failed,
  /// not sent) only while no master is known (the first call); afterwards a failed question
  /// keeps the master it has.
  ConnectionPool& pool(const RetryPolicy& policy);

  /// A call on `pool` failed as `calls_for_rediscovery` says a failover may look: the next call
  /// asks the sentinels first.
  void suspect(ConnectionPool& pool) noexcept { suspect_.store(&pool); }

  /// Asks the sentinels where the master is, as rediscovery_step decides for a call that failed
  /// on `failed`; moves to the master they name once it answers ROLE master, and retires the
  /// old pool (its connections close). Returns whether the master is now another than `failed`.
  bool rediscover(ConnectionPool* failed, const RetryPolicy& policy);

private:
  // Why the server of `pool` is not a master the library can use, or nullopt.
  static std::optional<std::string> refusal_as_master(ConnectionPool& pool);
  // The pool of a master address, made when first needed and kept (a call may still hold it).
  // Needs mutex_.
  ConnectionPool& pool_of_locked(const Endpoint& endpoint);

  RedisOptions options_;
  SentinelClient sentinels_;
  std::atomic<ConnectionPool*> master_{nullptr};
  // The master a failure made doubtful (set by any call).
  std::atomic<ConnectionPool*> suspect_{nullptr};
  std::mutex mutex_;                        // one question to the sentinels at a time
  RetryPolicy::Clock::time_point asked_at_; // needs mutex_
  std::vector<std::pair<Endpoint, std::unique_ptr<ConnectionPool>>> pools_; // needs mutex_
};

} // namespace limitcounter::detail
