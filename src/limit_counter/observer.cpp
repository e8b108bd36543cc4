#include <limitcounter/observer.hpp>

#include <ostream>

namespace limitcounter {

std::string_view to_string(LimiterKind kind) noexcept {
  return kind == LimiterKind::daily_cap ? "daily_cap" : "sliding_window";
}

std::string_view to_string(LimitOp op) noexcept {
  switch (op) {
  case LimitOp::consume: return "consume";
  case LimitOp::reserve: return "reserve";
  case LimitOp::check: return "check";
  case LimitOp::confirm: return "confirm";
  case LimitOp::cancel: return "cancel";
  case LimitOp::refund: return "refund";
  }
  return "other";
}

std::string_view to_string(WalletOp op) noexcept {
  switch (op) {
  case WalletOp::deduct: return "deduct";
  case WalletOp::deduct_many: return "deduct_many";
  case WalletOp::credit: return "credit";
  case WalletOp::rollback: return "rollback";
  case WalletOp::freeze: return "freeze";
  case WalletOp::unfreeze: return "unfreeze";
  }
  return "other";
}

std::string_view to_string(RedPacketOp op) noexcept {
  switch (op) {
  case RedPacketOp::create: return "create";
  case RedPacketOp::grab: return "grab";
  case RedPacketOp::grab_many: return "grab_many";
  case RedPacketOp::close: return "close";
  }
  return "other";
}

std::string_view to_string(PayoutOp op) noexcept {
  switch (op) {
  case PayoutOp::take: return "take";
  case PayoutOp::ack: return "ack";
  case PayoutOp::fail: return "fail";
  case PayoutOp::release: return "release";
  }
  return "other";
}

void StreamObserver::on_decision(LimitOp op, const Transaction& transaction,
                                 const Decision& decision, std::chrono::nanoseconds latency) {
  const std::lock_guard<std::mutex> lock(mutex_);
  // The op goes last, so the line begins as it did before the op was reported.
  out_ << "limitcounter decision tx=" << transaction.id
       << " verdict=" << (decision.allowed() ? "allowed" : "denied")
       << (decision.denial ? " rule=" + decision.denial->rule : std::string())
       << (decision.replayed ? " replayed" : "") << (decision.degraded ? " degraded" : "")
       << " latency_us=" << std::chrono::duration_cast<std::chrono::microseconds>(latency).count()
       << " op=" << to_string(op) << '\n';
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

void StreamObserver::operation_line(std::string_view job, std::string_view op,
                                    std::string_view status, std::chrono::nanoseconds latency) {
  const std::lock_guard<std::mutex> lock(mutex_);
  out_ << "limitcounter " << job << " op=" << op << " status=" << status
       << " latency_us=" << std::chrono::duration_cast<std::chrono::microseconds>(latency).count()
       << '\n';
}

void StreamObserver::on_transition(LimitOp op, std::string_view status,
                                   std::chrono::nanoseconds latency) {
  operation_line("transition", to_string(op), status, latency);
}

void StreamObserver::on_wallet_operation(WalletOp op, std::string_view status,
                                         std::chrono::nanoseconds latency) {
  operation_line("wallet", to_string(op), status, latency);
}

void StreamObserver::on_red_packet_operation(RedPacketOp op, std::string_view status,
                                             std::chrono::nanoseconds latency) {
  operation_line("red_packet", to_string(op), status, latency);
}

void StreamObserver::on_payout_operation(PayoutOp op, std::string_view status, std::size_t tasks,
                                         std::chrono::nanoseconds latency) {
  operation_line("payout", std::string(to_string(op)) + " tasks=" + std::to_string(tasks), status,
                 latency);
}

void StreamObserver::on_journal_lag(const JournalLag& lag) {
  const std::lock_guard<std::mutex> lock(mutex_);
  out_ << "limitcounter journal-lag group=" << lag.group << " partition=" << lag.partition
       << " unread=" << (lag.unread ? std::to_string(*lag.unread) : std::string("unknown"))
       << " pending=" << lag.pending << '\n';
}

} // namespace limitcounter
