#pragma once
// JournalConsumer: the persister's reader of the wallet journal. At-least-once: an event
// is acknowledged only after the host's handler returned; events of a consumer that died are
// claimed by another after an idle time. Only the group `WalletOptions::persister_group`
// persists: its acknowledgements clear pending orders and high-water marks; another group's
// (an auditor's) never do.
// Each user's events are handed out in version order, a poison event is parked in a
// dead-letter stream after `max_attempts` failures, and the journal stream is trimmed to
// what every consumer group has acknowledged.

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <limitcounter/calendar.hpp>
#include <limitcounter/journal_lag.hpp>
#include <limitcounter/observer.hpp>
#include <limitcounter/redis.hpp>
#include <limitcounter/wallet.hpp>

namespace limitcounter {

/// One journal event.
struct JournalEvent {
  /// Stable across deliveries: "<partition>/<stream id>". Use it (or type + order) to make
  /// the database write idempotent.
  std::string id;
  std::uint32_t partition = 0; ///< the journal partition it was read from
  std::string stream_id;       ///< its id in that partition's journal stream
  /// "deduct", "credit", "rollback", or "freeze" / "unfreeze" (`Wallet::freeze`: order
  /// empty, amount 0, balance unchanged, `reason` set; deduplicate those by `id` or user +
  /// version). A persister should fail (not skip) a type it does not know, so the event
  /// waits, then is parked, instead of being lost.
  std::string type;
  std::string user;         ///< the account's user
  std::string order;        ///< the order id (empty for freeze / unfreeze)
  std::int64_t amount = 0;  ///< minor units, > 0 (0 for freeze / unfreeze)
  std::int64_t balance = 0; ///< after the change
  std::int64_t version = 0; ///< the account's version after the change
  TimePoint time;           ///< when the wallet made the change (milliseconds)
  std::string reason{};     ///< freeze / unfreeze: the operator's reason
};

/// Settings of a JournalConsumer.
struct JournalConsumerOptions {
  /// The consumer group (a key part); created when first read. Its acknowledgements count as
  /// persisted only if it is `WalletOptions::persister_group`.
  std::string group = "persister";
  std::string consumer = "persister-1"; ///< unique per process
  std::size_t batch = 100;              ///< events per partition per poll
  /// Events another consumer read but did not acknowledge for this long are taken over; a
  /// failed event is retried after this long too (the retry back-off).
  std::chrono::milliseconds claim_idle{std::chrono::seconds{30}};
  /// Failed handler attempts after which an event is parked in the dead-letter stream
  /// (at least 1).
  std::uint32_t max_attempts = 5;
  /// Hooks for metrics: after each `poll` (one more round trip, only when set) and on each
  /// `lag` call, every partition's lag (those asked for) is reported to
  /// `observer->on_journal_lag`, and an Error of reading it to `on_error` (after `poll`
  /// that Error is not thrown: a metric does not fail the pass); none by default.
  std::shared_ptr<LimitObserver> observer{};
};

/// An event parked after `max_attempts` failed attempts (see `JournalConsumer::reject`).
struct DeadLetter {
  JournalEvent event;        ///< as it was in the journal (same `id` and `stream_id`)
  std::string dead_id;       ///< its id in the dead-letter stream (for paging)
  std::int64_t attempts = 0; ///< failed attempts before it was parked
  std::string error;         ///< the last failure's message (at most 1,000 bytes)
};

/// Reads the wallet journal as consumer `consumer` of group `group` and hands the events
/// to the host's persister (see the top of this header).
class JournalConsumer {
public:
  /// `wallet` must use the same prefix and partitions as the wallets writing the journal.
  /// Sends nothing. Throws `Error` (invalid_argument) naming a bad group, consumer or
  /// `WalletOptions::persister_group` name, a batch of 0, max_attempts of 0 or a negative
  /// claim_idle.
  JournalConsumer(Redis redis, const WalletOptions& wallet, JournalConsumerOptions options = {});

  /// The host's persister: write the events to the database, idempotently (by
  /// `JournalEvent::id`, or type + order): an event may come more than once.
  using Handler = std::function<void(const std::vector<JournalEvent>&)>;

  /// One pass over every partition: reads a batch (see `read`), hands it to `handle`, then
  /// acknowledges it (see `acknowledge`). If `handle` throws, the batch's events
  /// are handed again one at a time, in order: those that succeed are acknowledged; the
  /// first failure of a user is recorded (`reject`) and that user's later events of the
  /// batch are not handed out, so they follow the failed one when it is retried after
  /// `claim_idle` (or parked). After every partition was served, rethrows the first
  /// exception of an event that failed alone. Returns how many events were acknowledged.
  /// Non-blocking: call it in a loop.
  std::size_t poll(const Handler& handle);

  /// Reads one batch of `partition` without acknowledging it (for hosts that ack later).
  /// A user's events come in version order and never overtake an earlier event of the same
  /// user that is still with a consumer (unacknowledged and not idle for `claim_idle`) or
  /// waiting for its retry: such later events are held back and come after it. Events that
  /// another consumer (or a failure) left idle for `claim_idle` are taken over first.
  std::vector<JournalEvent> read(std::uint32_t partition);
  /// Acknowledges events read from one partition and trims the journal stream to the oldest
  /// entry some consumer group still needs (unread or unacknowledged): nothing another group
  /// has not acknowledged is ever trimmed. If this group is `WalletOptions::persister_group`,
  /// the events count as persisted: their orders leave the pending sets (`pending_orders`,
  /// `stale_pending`) and each event acknowledged now takes one from its user's high-water
  /// count; once every event of the user is acknowledged the mark is deleted and `Wallet::load`
  /// may take any newer snapshot again. Another group's acknowledgement changes neither. A group is
  /// created when it first reads: one created after others have acknowledged and trimmed
  /// starts at what is left, so start every group (e.g. an auditor's) before the first
  /// acknowledgement.
  void acknowledge(std::uint32_t partition, const std::vector<JournalEvent>& events);
  /// Records a failed attempt of events read from one partition, with `error` (cut to 1,000
  /// bytes). Each is retried after `claim_idle`; at `max_attempts` it is copied to the
  /// group's dead-letter stream and acknowledged, so the user's later events go on (its
  /// pending entries and its part of the user's high-water mark stay: it is not persisted).
  /// An event parked by the persister group is counted in its user's high-water mark, and
  /// while any is, `Wallet::load` refuses every snapshot of that user (conflict), since the
  /// later events may bring the system of record past the parked one without it. Once the
  /// host wrote it to the system of record, acknowledging its event (`DeadLetter::event`) with
  /// the persister group counts it as persisted and lifts that refusal. Returns how many were
  /// parked.
  std::size_t reject(std::uint32_t partition, const std::vector<JournalEvent>& events,
                     const std::string& error);
  /// Up to `max` dead letters of this group in `partition`, oldest first, after the dead
  /// letter `after` (a `DeadLetter::dead_id`; empty: from the start). They stay until the
  /// host deletes them (XDEL on `WalletKeys::dead_letters`).
  std::vector<DeadLetter> dead_letters(std::uint32_t partition, std::size_t max = 100,
                                       const std::string& after = {});

  /// How far this consumer's group is behind in every partition, in partition order (see
  /// `JournalLag`): one pipelined read-only script call per partition, in one round trip.
  /// Each is reported to the observer, if any. A Redis failure throws `Error` (as
  /// `Redis::eval_pipeline`); a partition's own error reply throws server_error.
  std::vector<JournalLag> lag();
  /// The same for one partition; throws invalid_argument naming a partition that is not
  /// below `WalletOptions::partitions`, before anything is sent.
  JournalLag lag(std::uint32_t partition);

private:
  /// Hands `events` (whose batch failed) to `handle` one at a time; see `poll`.
  std::size_t handle_one_by_one(std::uint32_t partition, const std::vector<JournalEvent>& events,
                                const Handler& handle, std::exception_ptr& failure);
  void check_partition(std::uint32_t partition) const;
  /// The lag of `partitions`, reported to the observer.
  std::vector<JournalLag> lag_of(const std::vector<std::uint32_t>& partitions);

  Redis redis_;
  WalletKeys keys_;
  std::string persister_group_; ///< `WalletOptions::persister_group`
  JournalConsumerOptions options_;
};

} // namespace limitcounter
