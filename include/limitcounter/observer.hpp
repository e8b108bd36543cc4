#pragma once
// Observability: a hook interface the host implements to count decisions per rule,
// near-limit events, degraded decisions, errors by kind and call latency, and the
// decisions of daily caps and sliding windows. PrometheusObserver
// (<limitcounter/prometheus.hpp>) is a ready implementation.

#include <chrono>
#include <iosfwd>
#include <mutex>
#include <string_view>

#include <limitcounter/decision.hpp>
#include <limitcounter/error.hpp>
#include <limitcounter/transaction.hpp>
#include <limitcounter/usage.hpp>

namespace limitcounter {

/// The limiter behind `LimitObserver::on_limiter_decision`.
enum class LimiterKind {
  daily_cap,      ///< `LimitCounter::take_daily_cap` and `take_daily_cap_many`
  sliding_window, ///< `LimitCounter::hit_sliding_window` and `hit_sliding_window_many`
};

/// "daily_cap" or "sliding_window".
std::string_view to_string(LimiterKind kind) noexcept;

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
  /// A call failed with `error` (thrown to the caller, turned into a degraded decision, or
  /// one item's error in a batch result), consume/reserve/check and caps/sliding windows.
  virtual void on_error(const Error& /*error*/) {}
  /// Every daily-cap take and sliding-window hit that Redis answered: `name` is the cap's or
  /// limiter's name as the caller gave it (never the subject, so it is fit for a metric
  /// label when the caller's names are a fixed set), `allowed` whether it was admitted, and
  /// how long the call took, Redis round trip included. In a batch each item is reported
  /// with the latency of the whole batch (one round trip); an item that failed is reported
  /// to `on_error` instead.
  virtual void on_limiter_decision(LimiterKind /*kind*/, std::string_view /*name*/,
                                   bool /*allowed*/, std::chrono::nanoseconds /*latency*/) {}
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
  void on_limiter_decision(LimiterKind kind, std::string_view name, bool allowed,
                           std::chrono::nanoseconds latency) override;

private:
  std::ostream& out_;
  std::mutex mutex_;
};

} // namespace limitcounter
