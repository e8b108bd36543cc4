#pragma once
// One retry budget (RedisOptions::retry) for the several calls of one operation: a limits
// transaction spread over cluster slots takes steps (begin at its home record, its shares, the
// finish), each idempotent by the transaction id and resent on a lost reply like any call
// marked Resend::same_id; the budget and the attempts are the operation's, not each step's, so
// the caller waits for lost replies no longer than for a single call's.

#include <optional>

#include <limitcounter/redis.hpp>

#include "redis/retry_policy.hpp"

namespace limitcounter::detail {

/// While alive, the calls marked Resend::same_id that this thread makes through `redis` (or a
/// copy of it: they share the pool) draw their resends from one ResendPolicy started now. A
/// scope opened inside another for the same Redis joins the outer one. Lives on the stack of
/// the thread that runs the operation.
class OperationResends {
public:
  explicit OperationResends(const Redis& redis);
  ~OperationResends();
  OperationResends(const OperationResends&) = delete;
  OperationResends& operator=(const OperationResends&) = delete;

  /// The policy of the scope open on this thread for the Redis whose options are `owner` (a
  /// Redis is known by the address of its options), or null.
  static ResendPolicy* of(const RedisOptions& owner);

private:
  const RedisOptions* owner_;
  std::optional<ResendPolicy> policy_; // empty when joining an outer scope
  OperationResends* outer_;
};

} // namespace limitcounter::detail
