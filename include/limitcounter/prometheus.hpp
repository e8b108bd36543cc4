#pragma once
// PrometheusObserver: a LimitObserver that keeps counters and latency histograms in the
// process and renders them in the Prometheus text exposition format 0.0.4, for the host to
// serve on its own `GET /metrics` (see examples/metrics_server.cpp).

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <limitcounter/observer.hpp>

namespace limitcounter {

/// Counts what LimitCounter reports; `render()` gives the text a Prometheus server scrapes.
///
/// Metrics (every latency in seconds, Redis round trip included):
/// - `limitcounter_decisions_total{op,verdict,rule}`: consume/reserve/check decisions. `op` is
///   "consume" (also each item of `consume_many`), "reserve" or "check"; `verdict` is
///   "allowed", "denied" or "cancelled"; `rule` the denying rule ("" when allowed or
///   cancelled). Replays count too.
/// - `limitcounter_decision_seconds{op}`: histogram of those decisions' latency.
/// - `limitcounter_degraded_total`: decisions taken by a failure policy without Redis.
/// - `limitcounter_replayed_total`: decisions that were replays of an earlier one (a retry).
/// - `limitcounter_near_limit_total{rule}`: allowed transactions that left a window at or
///   above `LimitCounterOptions::near_limit_fraction` of a limit of `rule`.
/// - `limitcounter_errors_total{code,outcome}`: errors by `errc` name ("timeout", ...) and
///   `Outcome` ("not_sent", "failed", "unknown").
/// - `limitcounter_local_usage_reported_total`: local-fallback usage reports added to Redis.
/// - `limitcounter_limiter_decisions_total{kind,name,verdict}`: daily-cap takes and
///   sliding-window hits; `kind` "daily_cap" or "sliding_window", `name` the cap's or
///   limiter's name, `verdict` "allowed" or "refused".
/// - `limitcounter_limiter_decision_seconds{kind}`: histogram of their latency.
/// - `limitcounter_transitions_total{op,status}`: confirm ("confirmed", "replayed"), cancel
///   ("cancelled", "replayed", "expired", "recorded_unknown") and refund ("refunded",
///   "replayed"), "error" for a call that threw.
/// - `limitcounter_transition_seconds{op}`: histogram of their latency.
/// - `limitcounter_wallet_operations_total{op,status}`: wallet calls (`op` "deduct",
///   "deduct_many" per item, "credit", "rollback", "freeze", "unfreeze"; `status` as
///   `LimitObserver::on_wallet_operation` says, "error" for a call that threw).
/// - `limitcounter_wallet_operation_seconds{op}`: histogram of their latency.
/// - `limitcounter_red_packet_operations_total{op,status}`: "create", "grab", "grab_many" per
///   item and "close", by status (see `on_red_packet_operation`).
/// - `limitcounter_red_packet_operation_seconds{op}`: histogram of their latency.
/// - `limitcounter_payout_operations_total{op,status}`: payout-queue calls "take" (status
///   "ok"), "ack" ("paid", "replayed", "stale") and "fail" ("retry", "dead_lettered",
///   "stale"), "error" for a call that threw.
/// - `limitcounter_payout_operation_seconds{op}`: histogram of their latency.
/// - `limitcounter_payout_tasks_taken_total`: payout tasks leased by takes.
/// - `limitcounter_journal_lag_entries{group,partition}` (gauge): journal events the consumer
///   group has not read yet, as last reported (`NaN` when Redis could not tell).
/// - `limitcounter_journal_pending_entries{group,partition}` (gauge): events read but not
///   acknowledged yet, as last reported.
///
/// Labels hold rule, cap and limiter names, journal group names, partition numbers and
/// fixed words only: never a transaction, order, packet or user id, subject, key or
/// amount, so the number of series is bounded by the rule set, the caller's cap and limiter
/// names, its groups and partitions. As a guard against a caller that builds names from
/// data, a family keeps at most `max_series_per_family` label sets; events of further
/// label sets are counted under the family's series whose every label is "_other_".
///
/// Thread-safe. A hook takes a shared lock to find its series (an exclusive one only the
/// first time a label set is seen) and adds with relaxed atomics: no I/O on the payment
/// path, only the small strings of the lookup key. `render()` reads the atomics one by one, so
/// a scrape concurrent with events may see a histogram's `_count` and `_sum` from slightly
/// different instants, as with any Prometheus client.
class PrometheusObserver final : public LimitObserver {
public:
  /// Upper bounds (seconds) of the latency histograms' buckets, `+Inf` besides: 100 us to
  /// 1 s, as a Redis round trip is usually well under a millisecond.
  static const std::vector<std::chrono::nanoseconds>& latency_buckets();

  /// Keeps at most `max_series_per_family` label sets per metric family; events of further label
  /// sets are counted under the label value "_other_" (a bound on cardinality).
  explicit PrometheusObserver(std::size_t max_series_per_family = 1000);
  ~PrometheusObserver() override;
  PrometheusObserver(const PrometheusObserver&) = delete;
  PrometheusObserver& operator=(const PrometheusObserver&) = delete;

  void on_decision(LimitOp op, const Transaction& transaction, const Decision& decision,
                   std::chrono::nanoseconds latency) override;
  void on_near_limit(const Transaction& transaction, const RuleStatus& rule) override;
  void on_error(const Error& error) override;
  void on_local_usage_reported(const std::string& key, const std::string& field,
                               const Usage& usage) override;
  void on_limiter_decision(LimiterKind kind, std::string_view name, bool allowed,
                           std::chrono::nanoseconds latency) override;
  void on_transition(LimitOp op, std::string_view status,
                     std::chrono::nanoseconds latency) override;
  void on_wallet_operation(WalletOp op, std::string_view status,
                           std::chrono::nanoseconds latency) override;
  void on_red_packet_operation(RedPacketOp op, std::string_view status,
                               std::chrono::nanoseconds latency) override;
  void on_payout_operation(PayoutOp op, std::string_view status, std::size_t tasks,
                           std::chrono::nanoseconds latency) override;
  void on_journal_lag(const JournalLag& lag) override;

  /// Every metric in the text exposition format 0.0.4 (serve it with the content type
  /// `text/plain; version=0.0.4; charset=utf-8`): `# HELP` and `# TYPE` per family, then its
  /// series sorted by label values; counters without labels are rendered at 0 before any
  /// event. Label values are escaped (backslash, double quote, newline).
  std::string render() const;

private:
  /// The series of one metric name (src/observability/prometheus_observer.cpp).
  class Family;

  std::unique_ptr<Family> decisions_;
  std::unique_ptr<Family> decision_seconds_;
  std::unique_ptr<Family> degraded_;
  std::unique_ptr<Family> replayed_;
  std::unique_ptr<Family> near_limit_;
  std::unique_ptr<Family> errors_;
  std::unique_ptr<Family> local_usage_reported_;
  std::unique_ptr<Family> limiter_decisions_;
  std::unique_ptr<Family> limiter_seconds_;
  std::unique_ptr<Family> transitions_;
  std::unique_ptr<Family> transition_seconds_;
  std::unique_ptr<Family> wallet_operations_;
  std::unique_ptr<Family> wallet_seconds_;
  std::unique_ptr<Family> red_packet_operations_;
  std::unique_ptr<Family> red_packet_seconds_;
  std::unique_ptr<Family> payout_operations_;
  std::unique_ptr<Family> payout_seconds_;
  std::unique_ptr<Family> payout_tasks_taken_;
  std::unique_ptr<Family> journal_lag_;
  std::unique_ptr<Family> journal_pending_;
};

/// `value` escaped for a label value of the text format: `\` `"` and newline as `\\` `\"` `\n`.
std::string escape_label_value(std::string_view value);

} // namespace limitcounter
