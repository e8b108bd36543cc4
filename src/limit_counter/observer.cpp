#include <limitcounter/observer.hpp>

#include <ostream>

namespace limitcounter {

std::string_view to_string(LimiterKind kind) noexcept {
  return kind == LimiterKind::daily_cap ? "daily_cap" : "sliding_window";
}

void StreamObserver::on_decision(const Transaction& transaction, const Decision& decision,
                                 std::chrono::nanoseconds latency) {
  const std::lock_guard<std::mutex> lock(mutex_);
  out_ << "limitcounter decision tx=" << transaction.id
       << " verdict=" << (decision.allowed() ? "allowed" : "denied")
       << (decision.denial ? " rule=" + decision.denial->rule : std::string())
       << (decision.replayed ? " replayed" : "") << (decision.degraded ? " degraded" : "")
       << " latency_us=" << std::chrono::duration_cast<std::chrono::microseconds>(latency).count()
       << '\n';
}

void StreamObserver::on_near_limit(const Transaction& transaction, const RuleStatus& rule) {
  const std::lock_guard<std::mutex> lock(mutex_);
  out_ << "limitcounter near-limit tx=" << transaction.id << " rule=" << rule.rule
       << " window=" << rule.window_id << " count=" << rule.used.count
       << " amount=" << rule.used.amount << '\n';
}

void StreamObserver::on_error(const Error& error) {
  const std::lock_guard<std::mutex> lock(mutex_);
  out_ << "limitcounter error kind=" << error.code().message() << " what=" << error.what() << '\n';
}

void StreamObserver::on_local_usage_reported(const std::string& key, const std::string& field,
                                             const Usage& usage) {
  const std::lock_guard<std::mutex> lock(mutex_);
  out_ << "limitcounter local-usage-reported key=" << key << " field=" << field
       << " count=" << usage.count << " amount=" << usage.amount << '\n';
}

void StreamObserver::on_limiter_decision(LimiterKind kind, std::string_view name, bool allowed,
                                         std::chrono::nanoseconds latency) {
  const std::lock_guard<std::mutex> lock(mutex_);
  out_ << "limitcounter " << to_string(kind) << " name=" << name
       << " verdict=" << (allowed ? "allowed" : "refused")
       << " latency_us=" << std::chrono::duration_cast<std::chrono::microseconds>(latency).count()
       << '\n';
}

} // namespace limitcounter
