#pragma once
// Observability: one hook interface for every job. The host implements it to count
// decisions per rule, near-limit events, degraded decisions, errors by kind and call
// latency, the decisions of daily caps and sliding windows, wallet operations, red packets,
// payouts and the wallet journal's lag. PrometheusObserver (<limitcounter/prometheus.hpp>)
// is a ready implementation.

#include <chrono>
#include <cstddef>
#include <iosfwd>
#include <mutex>
#include <string_view>

#include <limitcounter/decision.hpp>
#include <limitcounter/error.hpp>
#include <limitcounter/journal_lag.hpp>
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

/// The LimitCounter call behind `LimitObserver::on_decision` (consume, reserve, check) or
/// `LimitObserver::on_transition` (confirm, cancel, refund).
enum class LimitOp {
  consume, ///< `LimitCounter::consume` and each item of `consume_many`
  reserve, ///< `LimitCounter::reserve`
  check,   ///< `LimitCounter::check` (a dry run)
  confirm, ///< `LimitCounter::confirm`
  cancel,  ///< `LimitCounter::cancel`
  refund,  ///< `LimitCounter::refund`
};

/// "consume", "reserve", "check", "confirm", "cancel" or "refund".
std::string_view to_string(LimitOp op) noexcept;

/// The Wallet call behind `LimitObserver::on_wallet_operation`.
enum class WalletOp {
  deduct,      ///< `Wallet::deduct`
  deduct_many, ///< each item of `Wallet::deduct_many`
  credit,      ///< `Wallet::credit`
  rollback,    ///< `Wallet::rollback`
  freeze,      ///< `Wallet::freeze`
  unfreeze,    ///< `Wallet::unfreeze`
};

/// "deduct", "deduct_many", "credit", "rollback", "freeze" or "unfreeze".
std::string_view to_string(WalletOp op) noexcept;

/// The RedPacketPool call behind `LimitObserver::on_red_packet_operation`.
enum class RedPacketOp {
  create,    ///< `RedPacketPool::create`
  grab,      ///< `RedPacketPool::grab`
  grab_many, ///< each item of `RedPacketPool::grab_many`
  close,     ///< `RedPacketPool::close` (also each close of `close_expired`)
};

/// "create", "grab", "grab_many" or "close".
std::string_view to_string(RedPacketOp op) noexcept;

/// The payout-queue call behind `LimitObserver::on_payout_operation` (also those that
/// `RedPacketPool::run_payouts` makes).
enum class PayoutOp {
  take,    ///< `RedPacketPool::take_payouts`
  ack,     ///< `RedPacketPool::ack_payout`
  fail,    ///< `RedPacketPool::fail_payout`
  release, ///< `RedPacketPool::release_payout`
};

/// "take", "ack", "fail" or "release".
std::string_view to_string(PayoutOp op) noexcept;

/// One observer for every job: give the same instance to `LimitCounterOptions`,
/// `WalletOptions`, `RedPacketOptions` and `JournalConsumerOptions` (one interface, so one
/// implementation such as PrometheusObserver sees the whole process, and `on_error` counts
/// the errors of every job alike).
///
/// Hooks are called on the calling thread, after the call they report; implementations
/// must be thread-safe and fast (no I/O on the payment path; hand off to a metrics
/// library). Default implementations do nothing. Secrets never reach these hooks, and the
/// status words are fixed sets, so they are fit for metric labels; user, subject, order,
/// packet and transaction ids are never passed except inside `Transaction` (do not make
/// labels of them: their number is unbounded).
///
/// A call that throws an `Error` is reported to `on_error` and, for confirm, cancel,
/// refund, wallets, red packets and payouts, also to its operation hook with the status
/// "error" (so failures are counted per operation). In a `*_many` batch each item is
/// reported with the latency of the whole batch (one round trip); a batch that throws as a
/// whole is reported once.
class LimitObserver {
public:
  virtual ~LimitObserver() = default;
  /// Every consume (`op` consume, also each item of `consume_many`), reserve and check:
  /// the decision (see `degraded`, `denial->rule`) and how long the call took, Redis round
  /// trip included.
  virtual void on_decision(LimitOp /*op*/, const Transaction& /*transaction*/,
                           const Decision& /*decision*/, std::chrono::nanoseconds /*latency*/) {}
  /// Every confirm, cancel and refund that Redis answered, or that threw (`status` "error";
  /// the Error goes to `on_error` too). `status` for confirm: "confirmed" or "replayed"
  /// (confirmed before); for cancel: "cancelled", "replayed" (cancelled before), "expired" or
  /// "recorded_unknown" (see `CancelResult`); for refund: "refunded" or "replayed" (this refund
  /// id was applied before).
  virtual void on_transition(LimitOp /*op*/, std::string_view /*status*/,
                             std::chrono::nanoseconds /*latency*/) {}
  /// An allowed transaction left a rule's window at or above `near_limit_fraction` of a limit.
  virtual void on_near_limit(const Transaction& /*transaction*/, const RuleStatus& /*rule*/) {}
  /// A call failed with `error` (thrown to the caller, turned into a degraded decision, or
  /// one item's error in a batch result): consume/reserve/check, caps and sliding windows,
  /// wallet, red-packet and payout operations, and `JournalConsumer::lag` (a persister
  /// handler's exceptions are the host's own: not reported).
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
  /// Every wallet operation that Redis answered, or that threw (`status` "error"). `status`
  /// for deduct, deduct_many and credit: "ok" (money moved now), "replayed" (done before
  /// with this order id: nothing moved now), "insufficient", "not_loaded" or "frozen" (see
  /// `WalletResult::Status`); for rollback: "rolled_back", "replayed" (rolled back before) or
  /// "recorded_unknown"; for freeze and unfreeze: "changed" or "unchanged". `latency`: the
  /// whole call, a load through the loader included.
  virtual void on_wallet_operation(WalletOp /*op*/, std::string_view /*status*/,
                                   std::chrono::nanoseconds /*latency*/) {}
  /// Every red-packet operation that Redis answered, or that threw (`status` "error").
  /// `status` for create: "created" (this call completed the packet) or "replayed" (another
  /// call with the same id and content had); for grab and grab_many: "granted", "replayed" (the
  /// user had won before), "sold_out", "expired" or "too_many_attempts" (see `GrabResult`); for
  /// close: "closed" or "replayed".
  virtual void on_red_packet_operation(RedPacketOp /*op*/, std::string_view /*status*/,
                                       std::chrono::nanoseconds /*latency*/) {}
  /// Every payout-queue call that Redis answered, or that threw (`status` "error", `tasks`
  /// 0). take: `status` "ok", `tasks` the number of tasks leased (0 when none was due);
  /// ack: "paid", "replayed" (paid before under this lease: a retry) or "stale" (the lease
  /// had run out, see `ack_payout`), `tasks` 1; fail: "retry" (queued again after its
  /// back-off), "dead_lettered" or "stale" (the task was paid or is unknown), `tasks` 1; release:
  /// "released", "replayed" (released before under this lease: a retry) or "stale" (the
  /// lease was no longer held), `tasks` 1. A fail retried with the same lease answers, and is
  /// reported, as the first.
  virtual void on_payout_operation(PayoutOp /*op*/, std::string_view /*status*/,
                                   std::size_t /*tasks*/, std::chrono::nanoseconds /*latency*/) {}
  /// A journal partition's lag for one consumer group, read by `JournalConsumer::lag`
  /// (every partition after each `JournalConsumer::poll`, or those asked for on demand).
  virtual void on_journal_lag(const JournalLag& /*lag*/) {}
};

/// A ready observer that writes one line per event to a stream (e.g. std::clog).
class StreamObserver final : public LimitObserver {
public:
  explicit StreamObserver(std::ostream& out) : out_(out) {}
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

private:
  /// Writes "limitcounter <job> op=<op> status=<status> latency_us=<n>" under the lock.
  void operation_line(std::string_view job, std::string_view op, std::string_view status,
                      std::chrono::nanoseconds latency);

  std::ostream& out_;
  std::mutex mutex_;
};

} // namespace limitcounter
