#pragma once
// Observability: a hook interface the host implements to count decisions per rule,
// near-limit events, degraded decisions, errors by kind and call latency.

#include <chrono>
#include <iosfwd>
#include <mutex>

#include <limitcounter/decision.hpp>
#include <limitcounter/error.hpp>
#include <limitcounter/transaction.hpp>
#include <limitcounter/usage.hpp>

namespace limitcounter {

/// Called by LimitCounter on the calling thread, after each decision; implementations
/// must be thread-safe and fast (no I/O on the payment path; hand off to a metrics
/// library). Default implementations do nothing. Secrets never reach these hooks.
class LimitObserver {
public:
  virtual ~LimitObserver() = default;
  /// Every consume, reserve and check: the decision (see `degraded`, `denial->rule`) and
  /// how long the call took, Redis round trip included.
  virtual void on_decision(const Transaction& /*transaction*/, const Decision& /*decision*/,
                           std::chrono::nanoseconds /*latency*/) {}
  /// An allowed transaction left a rule's window at or above `near_limit_fraction` of a limit.
  virtual void on_near_limit(const Transaction& /*transaction*/, const RuleStatus& /*rule*/) {}
  /// A call failed with `error` (thrown to the caller, or turned into a degraded decision).
  virtual void on_error(const Error& /*error*/) {}
  /// Redis answers again, and what this node allowed on its own share meanwhile was added
  /// to the counter `field` of `key`.
  virtual void on_local_usage_reported(const std::string& /*key*/, const std::string& /*field*/,
                                       const Usage& /*usage*/) {}
};

/// A ready observer that writes one line per event to a stream (e.g. std::clog).
class StreamObserver final : public LimitObserver {
public:
  explicit StreamObserver(std::ostream& out) : out_(out) {}
  void on_decision(const Transaction& transaction, const Decision& decision,
                   std::chrono::nanoseconds latency) override;
  void on_near_limit(const Transaction& transaction, const RuleStatus& rule) override;
  void on_error(const Error& error) override;
  void on_local_usage_reported(const std::string& key, const std::string& field,
                               const Usage& usage) override;

private:
  std::ostream& out_;
  std::mutex mutex_;
};

} // namespace limitcounter
