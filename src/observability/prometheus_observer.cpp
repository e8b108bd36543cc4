#include <limitcounter/prometheus.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <utility>

namespace limitcounter {
namespace {

using Labels = std::vector<std::string>;

// Seconds, exactly, from whole nanoseconds: "0.00025", "1", "0" (no exponent, no rounding).
std::string seconds_text(std::uint64_t nanos) {
  std::string text = std::to_string(nanos / 1000000000U);
  std::string fraction = std::to_string(nanos % 1000000000U);
  fraction.insert(0, 9 - fraction.size(), '0');
  fraction.erase(fraction.find_last_not_of('0') + 1);
  return fraction.empty() ? text : text + "." + fraction;
}

std::uint64_t clamped_nanos(std::chrono::nanoseconds latency) {
  // A system clock stepped back mid-call gives a negative latency: counted as 0.
  return static_cast<std::uint64_t>(std::max<std::int64_t>(latency.count(), 0));
}

std::string_view errc_name(const std::error_code& code) {
  if (code.category() != error_category()) {
    return "other";
  }
  switch (static_cast<errc>(code.value())) {
  case errc::invalid_argument: return "invalid_argument";
  case errc::unknown_time_zone: return "unknown_time_zone";
  case errc::precision_overflow: return "precision_overflow";
  case errc::window_closed: return "window_closed";
  case errc::conflict: return "conflict";
  case errc::not_found: return "not_found";
  case errc::cross_slot: return "cross_slot";
  case errc::connect_failed: return "connect_failed";
  case errc::pool_exhausted: return "pool_exhausted";
  case errc::io_error: return "io_error";
  case errc::timeout: return "timeout";
  case errc::server_error: return "server_error";
  case errc::protocol_error: return "protocol_error";
  case errc::cluster_down: return "cluster_down";
  case errc::circuit_open: return "circuit_open";
  }
  return "other";
}

std::string_view outcome_name(Outcome outcome) {
  switch (outcome) {
  case Outcome::not_sent: return "not_sent";
  case Outcome::failed: return "failed";
  case Outcome::unknown: return "unknown";
  }
  return "other";
}

std::string_view verdict_name(Decision::Verdict verdict) {
  switch (verdict) {
  case Decision::Verdict::allowed: return "allowed";
  case Decision::Verdict::denied: return "denied";
  case Decision::Verdict::cancelled: return "cancelled";
  }
  return "other";
}

} // namespace

std::string escape_label_value(std::string_view value) {
  std::string escaped;
  escaped.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') {
      escaped += "\\\\";
    } else if (c == '"') {
      escaped += "\\\"";
    } else if (c == '\n') {
      escaped += "\\n";
    } else {
      escaped += c;
    }
  }
  return escaped;
}

const std::vector<std::chrono::nanoseconds>& PrometheusObserver::latency_buckets() {
  using std::chrono::microseconds;
  using std::chrono::milliseconds;
  static const std::vector<std::chrono::nanoseconds> buckets{
      microseconds{100}, microseconds{250}, microseconds{500}, milliseconds{1},  microseconds{2500},
      milliseconds{5},   milliseconds{10},  milliseconds{25},  milliseconds{50}, milliseconds{100},
      milliseconds{250}, milliseconds{500}, milliseconds{1000}};
  return buckets;
}

class PrometheusObserver::Family {
public:
  enum class Type { counter, gauge, histogram };

  /// A gauge's value when it is unknown: rendered as NaN.
  static constexpr std::int64_t unknown = std::numeric_limits<std::int64_t>::min();

  Family(std::string name, std::string help, Type type, Labels label_names, std::size_t max_series)
      : name_(std::move(name)), help_(std::move(help)), type_(type),
        label_names_(std::move(label_names)), max_series_(max_series) {
    if (label_names_.empty()) {
      find(Labels{}); // rendered at 0 from the start, as Prometheus clients do
    }
  }

  void add(const Labels& labels, std::uint64_t n = 1) {
    find(labels).count.fetch_add(n, std::memory_order_relaxed);
  }

  /// A gauge's value (`unknown`: NaN), kept in `count` as the bits of an int64.
  void set(const Labels& labels, std::int64_t value) {
    find(labels).count.store(static_cast<std::uint64_t>(value), std::memory_order_relaxed);
  }

  void observe(const Labels& labels, std::chrono::nanoseconds latency) {
    Series& series = find(labels);
    const std::uint64_t nanos = clamped_nanos(latency);
    const auto& bounds = latency_buckets();
    // Each bucket holds only the events of its own range; render() makes them cumulative.
    const auto bucket = static_cast<std::size_t>(
        std::lower_bound(bounds.begin(), bounds.end(), std::chrono::nanoseconds(nanos)) -
        bounds.begin());
    if (bucket < bounds.size()) {
      series.buckets[bucket].fetch_add(1, std::memory_order_relaxed);
    }
    series.sum_nanos.fetch_add(nanos, std::memory_order_relaxed);
    series.count.fetch_add(1, std::memory_order_relaxed);
  }

  void render(std::string& out) const {
    out += "# HELP " + name_ + " " + help_ + "\n";
    out += "# TYPE " + name_ +
           (type_ == Type::counter ? " counter\n"
            : type_ == Type::gauge ? " gauge\n"
                                   : " histogram\n");
    const std::shared_lock<std::shared_mutex> lock(mutex_);
    for (const auto& [labels, series] : series_) {
      const std::string pairs = label_pairs(labels);
      if (type_ == Type::counter) {
        out += name_ + braced(pairs) + " " + std::to_string(series->count.load()) + "\n";
        continue;
      }
      if (type_ == Type::gauge) {
        const auto value = static_cast<std::int64_t>(series->count.load());
        out += name_ + braced(pairs) + " " +
               (value == unknown ? std::string("NaN") : std::to_string(value)) + "\n";
        continue;
      }
      const std::string sep = pairs.empty() ? "" : ",";
      const auto& bounds = latency_buckets();
      std::uint64_t cumulative = 0;
      for (std::size_t i = 0; i < bounds.size(); ++i) {
        cumulative += series->buckets[i].load();
        out += name_ + "_bucket{" + pairs + sep + "le=\"" +
               seconds_text(static_cast<std::uint64_t>(bounds[i].count())) + "\"} " +
               std::to_string(cumulative) + "\n";
      }
      const std::uint64_t count = series->count.load();
      out += name_ + "_bucket{" + pairs + sep + "le=\"+Inf\"} " + std::to_string(count) + "\n";
      out += name_ + "_sum" + braced(pairs) + " " + seconds_text(series->sum_nanos.load()) + "\n";
      out += name_ + "_count" + braced(pairs) + " " + std::to_string(count) + "\n";
    }
  }

private:
  struct Series {
    std::atomic<std::uint64_t> count{0}; ///< a counter's value; a histogram's `_count`
    std::atomic<std::uint64_t> sum_nanos{0};
    /// Per bucket, the events of that bucket alone (value-initialised: all zero).
    std::unique_ptr<std::atomic<std::uint64_t>[]> buckets;
  };

  Series& find(const Labels& labels) {
    {
      const std::shared_lock<std::shared_mutex> lock(mutex_);
      const auto found = series_.find(labels);
      if (found != series_.end()) {
        return *found->second;
      }
    }
    const std::unique_lock<std::shared_mutex> lock(mutex_);
    const bool full = series_.size() >= max_series_ && series_.count(labels) == 0;
    auto& slot = series_[full ? Labels(label_names_.size(), "_other_") : labels];
    if (!slot) {
      slot = std::make_unique<Series>();
      if (type_ == Type::histogram) {
        slot->buckets.reset(new std::atomic<std::uint64_t>[latency_buckets().size()]());
      }
    }
    return *slot;
  }

  std::string label_pairs(const Labels& values) const {
    std::string pairs;
    for (std::size_t i = 0; i < values.size(); ++i) {
      pairs += (i == 0 ? "" : ",") + label_names_[i] + "=\"" + escape_label_value(values[i]) + "\"";
    }
    return pairs;
  }

  static std::string braced(const std::string& pairs) {
    return pairs.empty() ? std::string() : "{" + pairs + "}";
  }

  std::string name_;
  std::string help_;
  Type type_;
  Labels label_names_;
  std::size_t max_series_;
  mutable std::shared_mutex mutex_;
  std::map<Labels, std::unique_ptr<Series>> series_;
};

PrometheusObserver::PrometheusObserver(std::size_t max_series_per_family) {
  using Type = Family::Type;
  const auto family = [&](std::string name, std::string help, Type type, Labels labels) {
    return std::make_unique<Family>(std::move(name), std::move(help), type, std::move(labels),
                                    max_series_per_family);
  };
  decisions_ = family("limitcounter_decisions_total", "Consume, reserve and check decisions.",
                      Type::counter, {"op", "verdict", "rule"});
  decision_seconds_ = family("limitcounter_decision_seconds",
                             "Latency of consume, reserve and check, Redis round trip included.",
                             Type::histogram, {"op"});
  degraded_ = family("limitcounter_degraded_total",
                     "Decisions taken by a failure policy because Redis could not be reached.",
                     Type::counter, {});
  replayed_ = family("limitcounter_replayed_total",
                     "Decisions that replayed an earlier decision of the same transaction id.",
                     Type::counter, {});
  near_limit_ = family("limitcounter_near_limit_total",
                       "Allowed transactions that left a window of the rule near its limit.",
                       Type::counter, {"rule"});
  errors_ = family("limitcounter_errors_total", "Errors by code and whether the command ran.",
                   Type::counter, {"code", "outcome"});
  local_usage_reported_ =
      family("limitcounter_local_usage_reported_total",
             "Usage allowed on a local share while Redis was away, added back to Redis.",
             Type::counter, {});
  limiter_decisions_ =
      family("limitcounter_limiter_decisions_total", "Daily cap takes and sliding window hits.",
             Type::counter, {"kind", "name", "verdict"});
  limiter_seconds_ =
      family("limitcounter_limiter_decision_seconds",
             "Latency of daily cap takes and sliding window hits.", Type::histogram, {"kind"});
  transitions_ =
      family("limitcounter_transitions_total", "Confirms, cancels and refunds of transactions.",
             Type::counter, {"op", "status"});
  transition_seconds_ = family("limitcounter_transition_seconds",
                               "Latency of confirm, cancel and refund, Redis round trip included.",
                               Type::histogram, {"op"});
  wallet_operations_ = family("limitcounter_wallet_operations_total",
                              "Wallet deductions, credits, rollbacks, freezes and unfreezes.",
                              Type::counter, {"op", "status"});
  wallet_seconds_ =
      family("limitcounter_wallet_operation_seconds",
             "Latency of wallet operations, Redis round trip included.", Type::histogram, {"op"});
  red_packet_operations_ =
      family("limitcounter_red_packet_operations_total", "Red packet creates, grabs and closes.",
             Type::counter, {"op", "status"});
  red_packet_seconds_ = family("limitcounter_red_packet_operation_seconds",
                               "Latency of red packet operations, Redis round trip included.",
                               Type::histogram, {"op"});
  payout_operations_ =
      family("limitcounter_payout_operations_total", "Payout queue takes, acks and fails.",
             Type::counter, {"op", "status"});
  payout_seconds_ =
      family("limitcounter_payout_operation_seconds",
             "Latency of payout queue calls, Redis round trip included.", Type::histogram, {"op"});
  payout_tasks_taken_ = family("limitcounter_payout_tasks_taken_total",
                               "Payout tasks leased to workers.", Type::counter, {});
  journal_lag_ = family("limitcounter_journal_lag_entries",
                        "Wallet journal events not yet read by the consumer group.", Type::gauge,
                        {"group", "partition"});
  journal_pending_ = family("limitcounter_journal_pending_entries",
                            "Wallet journal events read by the consumer group, not acknowledged.",
                            Type::gauge, {"group", "partition"});
}

PrometheusObserver::~PrometheusObserver() = default;

void PrometheusObserver::on_decision(LimitOp limit_op, const Transaction& /*transaction*/,
                                     const Decision& decision, std::chrono::nanoseconds latency) {
  const std::string op(to_string(limit_op));
  decisions_->add({op, std::string(verdict_name(decision.verdict)),
                   decision.denial ? decision.denial->rule : std::string()});
  decision_seconds_->observe({op}, latency);
  if (decision.degraded) {
    degraded_->add({});
  }
  if (decision.replayed) {
    replayed_->add({});
  }
}

void PrometheusObserver::on_near_limit(const Transaction& /*transaction*/, const RuleStatus& rule) {
  near_limit_->add({rule.rule});
}

void PrometheusObserver::on_error(const Error& error) {
  errors_->add({std::string(errc_name(error.code())), std::string(outcome_name(error.outcome()))});
}

void PrometheusObserver::on_local_usage_reported(const std::string& /*key*/,
                                                 const std::string& /*field*/,
                                                 const Usage& /*usage*/) {
  local_usage_reported_->add({});
}

void PrometheusObserver::on_limiter_decision(LimiterKind kind, std::string_view name, bool allowed,
                                             std::chrono::nanoseconds latency) {
  const std::string kind_name(to_string(kind));
  limiter_decisions_->add({kind_name, std::string(name), allowed ? "allowed" : "refused"});
  limiter_seconds_->observe({kind_name}, latency);
}

void PrometheusObserver::on_transition(LimitOp op, std::string_view status,
                                       std::chrono::nanoseconds latency) {
  const std::string op_name(to_string(op));
  transitions_->add({op_name, std::string(status)});
  transition_seconds_->observe({op_name}, latency);
}

void PrometheusObserver::on_wallet_operation(WalletOp op, std::string_view status,
                                             std::chrono::nanoseconds latency) {
  const std::string op_name(to_string(op));
  wallet_operations_->add({op_name, std::string(status)});
  wallet_seconds_->observe({op_name}, latency);
}

void PrometheusObserver::on_red_packet_operation(RedPacketOp op, std::string_view status,
                                                 std::chrono::nanoseconds latency) {
  const std::string op_name(to_string(op));
  red_packet_operations_->add({op_name, std::string(status)});
  red_packet_seconds_->observe({op_name}, latency);
}

void PrometheusObserver::on_payout_operation(PayoutOp op, std::string_view status,
                                             std::size_t tasks, std::chrono::nanoseconds latency) {
  const std::string op_name(to_string(op));
  payout_operations_->add({op_name, std::string(status)});
  payout_seconds_->observe({op_name}, latency);
  if (op == PayoutOp::take && tasks > 0) {
    payout_tasks_taken_->add({}, tasks);
  }
}

void PrometheusObserver::on_journal_lag(const JournalLag& lag) {
  const Labels labels{lag.group, std::to_string(lag.partition)};
  journal_lag_->set(labels, lag.unread.value_or(Family::unknown));
  journal_pending_->set(labels, lag.pending);
}

std::string PrometheusObserver::render() const {
  std::string out;
  for (const Family* family : {decisions_.get(),
                               decision_seconds_.get(),
                               degraded_.get(),
                               replayed_.get(),
                               near_limit_.get(),
                               errors_.get(),
                               local_usage_reported_.get(),
                               limiter_decisions_.get(),
                               limiter_seconds_.get(),
                               transitions_.get(),
                               transition_seconds_.get(),
                               wallet_operations_.get(),
                               wallet_seconds_.get(),
                               red_packet_operations_.get(),
                               red_packet_seconds_.get(),
                               payout_operations_.get(),
                               payout_seconds_.get(),
                               payout_tasks_taken_.get(),
                               journal_lag_.get(),
                               journal_pending_.get()}) {
    family->render(out);
  }
  return out;
}

} // namespace limitcounter
