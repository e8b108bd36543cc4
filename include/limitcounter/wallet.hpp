#pragma once
// Wallet: user balances in Redis with an atomic journal (job 4 of docs/ARCHITECTURE.md).
// A deduction, its order record, its pending entry and its journal event are written by
// one script, so no deduction can exist without its event.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <limitcounter/batch.hpp>
#include <limitcounter/calendar.hpp>
#include <limitcounter/error.hpp>
#include <limitcounter/observer.hpp>
#include <limitcounter/redis.hpp>
#include <limitcounter/wallet_keys.hpp>

namespace limitcounter {

/// Settings of a Wallet (and of its JournalConsumer: the same prefix and partitions).
struct WalletOptions {
  std::string key_prefix = std::string(WalletKeys::default_prefix); ///< see `WalletKeys`
  /// Journal partitions (Redis Streams); a user's events always go to the same one. Every
  /// process of the host must use the same number.
  std::uint32_t partitions = 16;
  /// How long an order record is kept (its id deduplicates retries meanwhile).
  std::chrono::milliseconds order_ttl{std::chrono::hours{24 * 7}};
  /// The consumer group that writes the journal to the system of record (a key part, checked
  /// by `JournalConsumer`). Only its acknowledgements count as persisted: they clear pending
  /// orders and the user's high-water mark, which let a load go back to an older snapshot.
  /// Other groups (an auditor, an analytics feed) only read.
  std::string persister_group = "persister";
  /// Hooks for metrics: every deduct, deduct_many item, credit, rollback, freeze and
  /// unfreeze is reported to `observer->on_wallet_operation` (status and latency), its
  /// errors to `on_error` too; none by default. The JournalConsumer has its own
  /// (`JournalConsumerOptions::observer`).
  std::shared_ptr<LimitObserver> observer{};
};

/// A user's balance as the system of record has it, for `Wallet::load`.
struct AccountSnapshot {
  std::int64_t balance = 0;   ///< minor units; may be negative down to the threshold
  std::int64_t version = 0;   ///< increases with every change in the system of record
  std::int64_t threshold = 0; ///< the least balance a deduction may leave
  /// The system of record has the account frozen, for this reason (a valid freeze reason,
  /// see `Wallet::freeze`). A load can freeze the cached account but never unfreezes it:
  /// only `Wallet::unfreeze` does, so a loader that does not know the flag cannot lift a
  /// freeze. Empty: not frozen there.
  std::string freeze_reason{};
};

/// A user's cached account.
struct Account {
  std::int64_t balance = 0;   ///< minor units
  std::int64_t threshold = 0; ///< the least balance a deduction may leave
  std::int64_t version = 0;   ///< the loaded version, + 1 per change since
  TimePoint updated;          ///< time of the last load or change (milliseconds)
  bool frozen = false;        ///< deductions are refused (`WalletResult::Status::frozen`)
  /// The reason of the last freeze or unfreeze (or of the load that froze); empty if never.
  std::string freeze_reason{};
  TimePoint
      freeze_changed{}; ///< when that was (the call's `at`, or the load's time); epoch if never
};

/// The outcome of `deduct` or `credit`.
struct WalletResult {
  /// What happened to the order.
  enum class Status {
    ok,           ///< done now, or done before with this id (`replayed`): nothing moved twice
    insufficient, ///< balance - amount would fall below the threshold; nothing recorded
    not_loaded,   ///< the user is not cached and no loader could load it
    /// the account is frozen (`Wallet::freeze`): a deduction is refused and not recorded
    /// (its retry decides again, e.g. after `unfreeze`); `balance` and `version` as found
    frozen,
  };
  Status status = Status::ok; ///< see `Status`
  /// True when the order was done before: this is its first result, nothing moved now.
  bool replayed = false;
  std::int64_t balance = 0;    ///< after the change (ok) or as found (insufficient)
  std::int64_t version = 0;    ///< the account's version, like `balance`
  std::string event_id;        ///< the journal event of the change (ok)
  std::string freeze_reason{}; ///< why the account is frozen (frozen)
};

/// One deduction of `Wallet::deduct_many`: the arguments of one `deduct` call.
struct WalletOrder {
  std::string user;            ///< a key part
  std::string order;           ///< the idempotency id, a key part (':' allowed)
  std::int64_t amount = 0;     ///< minor units, in [1, 2^53)
  TimePoint at = Clock::now(); ///< the order's time, stored in its order record
};

/// The outcome of `rollback`.
struct RollbackResult {
  /// What the rollback did.
  enum class Status {
    /// reversed: balance restored, version + 1, reversal event appended (by this call, or
    /// before when `replayed`)
    rolled_back,
    /// the order was unknown: a rolled-back marker is recorded (TTL `order_ttl`), so a late
    /// deduct or credit of it is refused (conflict). Unknown means never done, or done more
    /// than `order_ttl` ago (its record expired): then nothing was given back; reverse such
    /// an old order in your system of record
    recorded_unknown,
  };
  Status status = Status::rolled_back; ///< see `Status`
  /// True when the order had been rolled back before (by another call, or by this same call
  /// whose reply was lost; also when an earlier rollback recorded it unknown): `status` is then
  /// rolled_back and nothing changed now.
  bool replayed = false;
};

/// Balances in Redis. Thread-safe; share one instance.
///
/// Amounts are minor units in [1, 2^53); order and user ids are key parts (':' allowed in
/// order ids). Bad input throws `Error` before anything is sent.
class Wallet {
public:
  /// Loads a missing user from the system of record; empty if the user does not exist.
  using Loader = std::function<std::optional<AccountSnapshot>(const std::string& user)>;

  /// Sends nothing. Without a `loader`, only users cached by `load` can be used (`deduct`
  /// of another answers not_loaded). Throws `Error` (invalid_argument) for a bad prefix, partitions
  /// outside 1..1024 or an order_ttl that is not positive.
  explicit Wallet(Redis redis, WalletOptions options = {}, Loader loader = {});

  /// Caches `snapshot` unless a newer or equal version is cached: a stale load never
  /// overwrites a newer balance. Returns true if it was stored. Throws conflict
  /// (Outcome::failed, nothing written) if the snapshot's version is below that of an order of
  /// the user not yet persisted (`pending_orders`) or below the user's high-water mark (the
  /// newest journal event, while the persister group has not acknowledged every event up to it:
  /// `WalletKeys::high_water`): a balance from before a deduct would give back what it took, to
  /// be spent again, and one from before a rollback, freeze or unfreeze would undo it. Retry
  /// once the persister has written it (an order whose record expired while pending refuses
  /// every load until it is resolved). While an event of the user is parked by the persister
  /// group (`JournalConsumer::reject`), every snapshot is refused with conflict naming the user
  /// and the parked count, whatever its version: the user's later events were persisted past
  /// it, so a newer version may still lack it; the host writes it and acknowledges it with the
  /// persister group (`JournalConsumer::acknowledge`) first. Every call that loads a missing
  /// user through the loader (deduct, deduct_many, credit, rollback, freeze, unfreeze) throws
  /// these conflicts too.
  bool load(const std::string& user, const AccountSnapshot& snapshot);

  /// Takes `amount` from the user's balance if `balance - amount >= threshold`, and in the
  /// same script bumps the version, records the order (TTL `order_ttl`), adds it to the
  /// pending sets and appends a "deduct" journal event. Idempotent by `order`: a retry
  /// (e.g. after Outcome::unknown, a lost reply) returns the first result with `replayed`
  /// set and deducts nothing (an insufficient attempt is not recorded, so its retry decides
  /// again). A missing user is loaded through the loader (once per miss across threads) and
  /// the deduction proceeds; a snapshot older than an order not yet persisted is refused as by
  /// `load` (conflict, nothing deducted). Throws conflict if the order id was used for another
  /// type or amount, or was rolled back; if the loader throws, an Error (its own, or not_found
  /// with Outcome::not_sent naming the user and the loader's message: nothing was deducted).
  WalletResult deduct(const std::string& user, const std::string& order, std::int64_t amount,
                      TimePoint at = Clock::now());

  /// Runs many independent `deduct`s pipelined on one connection (one round trip) and
  /// returns one result per order, in order (a conflict or overflow is that order's Error).
  /// Each deduction is atomic and idempotent by its order on its own; the batch is not:
  /// deductions of one user apply in the order given, except for a user that is not cached
  /// while another thread loads it: a deduction answered not_loaded is sent again after a later
  /// one of the same user that found the account loaded (each still checks the balance; which
  /// of them is refused as insufficient may then differ). Users that are not cached are loaded
  /// through the loader (once per user) and just their deductions sent again in a second
  /// pipeline; a loader that throws makes that user's deductions its Error (any other
  /// exception becomes not_found, Outcome::not_sent, naming the user and its message). Bad input
  /// anywhere throws before anything is sent; a Redis failure throws for the whole batch
  /// (see `Redis::eval_pipeline`) and the same batch may be sent again: every order applies
  /// once.
  std::vector<BatchResult<WalletResult>> deduct_many(const std::vector<WalletOrder>& orders);

  /// Adds `amount` (a top-up or refund), with the same record, pending entry, journal event,
  /// idempotency and errors as `deduct`; precision_overflow (naming balance and amount) if the
  /// balance would pass 2^53 - 1.
  WalletResult credit(const std::string& user, const std::string& order, std::int64_t amount,
                      TimePoint at = Clock::now());

  /// Reverses a deduct or credit once (see RollbackResult); idempotent by `order`.
  ///
  /// An unknown order is recorded as rolled back even if the user is not cached: the deduct
  /// being reversed may still arrive late (a lost or slow request), and the marker makes it
  /// fail instead of taking money after its reversal. A known order whose user is not cached
  /// (evicted, expired) is reversed after reloading the user through the loader; the reload
  /// must already contain the order (version at least the order's), else conflict
  /// (Outcome::failed, nothing written: retry once the persister has written the order).
  /// Throws not_found if the user is not cached and no loader has it, precision_overflow
  /// (naming balance and amount) if the balance would pass +-(2^53 - 1), and the loader's
  /// failure as for `deduct`. Nothing is written when it throws.
  RollbackResult rollback(const std::string& user, const std::string& order,
                          TimePoint at = Clock::now());

  /// Longest freeze reason, in bytes.
  static constexpr std::size_t max_freeze_reason_bytes = 256;

  /// Freezes the account: from the moment this script runs every `deduct` (and item of
  /// `deduct_many`) of the user is refused with `WalletResult::Status::frozen`, checked
  /// inside the deduction script, so no deduction that Redis runs after the freeze passes.
  /// Credits and rollbacks still apply, and a retry of an order done before the freeze
  /// still replays its first result. On a change the reason and `at` are kept with the
  /// account (`account()`), the version goes up by one and a "freeze" journal event (order
  /// empty, amount 0, the balance unchanged, `JournalEvent::reason`) is appended for the
  /// persister. Idempotent: returns false and writes nothing if the account is frozen
  /// already (the reason kept is the first one's), so a retry after Outcome::unknown is safe;
  /// the library's own resend after a lost reply (`RedisOptions::retry`) may so return false
  /// for a freeze that its first send made.
  /// A user that is not cached is loaded through the loader first (a freeze must hold for an
  /// account whatever the cache holds); throws not_found (Outcome::failed, nothing written)
  /// if no loader has it, and the loader's failure as for `deduct`. `reason`: 1 to
  /// `max_freeze_reason_bytes` bytes of display text (`validate_display_text`: valid UTF-8
  /// without C0 or C1 controls, U+2028 or U+2029), else invalid_argument naming it, before
  /// anything is sent. `user`, like every id, is a key part (`validate_key_part`).
  bool freeze(const std::string& user, const std::string& reason, TimePoint at = Clock::now());
  /// Lifts a freeze; the same contract as `freeze` with an "unfreeze" event; returns false
  /// and writes nothing if the account is not frozen.
  bool unfreeze(const std::string& user, const std::string& reason, TimePoint at = Clock::now());

  /// The cached account, if any, with its frozen flag and reason.
  std::optional<Account> account(const std::string& user);

  /// The user's orders not yet persisted whose time is before `now - older_than`.
  std::vector<std::string> pending_orders(const std::string& user,
                                          std::chrono::milliseconds older_than,
                                          TimePoint now = Clock::now());
  /// Every "<user>:<order>" of `partition` not yet persisted, older than `older_than`.
  std::vector<std::string> stale_pending(std::uint32_t partition,
                                         std::chrono::milliseconds older_than,
                                         TimePoint now = Clock::now());

  /// Whether the cached balance and version equal the system of record's.
  struct Comparison {
    bool cached = false;             ///< the user is cached in Redis
    bool matches = false;            ///< cached, with the same balance and version
    std::int64_t cached_balance = 0; ///< the cached balance (0 if not cached)
    std::int64_t cached_version = 0; ///< the cached version (0 if not cached)
  };
  /// Compares the cached account with the system of record's `balance` and `version`
  /// (reconciliation); reads only.
  Comparison compare(const std::string& user, std::int64_t balance, std::int64_t version);

  /// The key names this wallet uses.
  const WalletKeys& keys() const noexcept { return keys_; }

private:
  WalletResult change(const char* op, const WalletOrder& order);
  /// `deduct_many` without reporting to the observer.
  std::vector<BatchResult<WalletResult>> run_deduct_many(const std::vector<WalletOrder>& orders);
  /// `rollback` without reporting to the observer.
  RollbackResult run_rollback(const std::string& user, const std::string& order, TimePoint at);
  /// Runs the wallet script; if the user is not cached and a loader is set, loads the user
  /// (see `load_missing`, whose Error it throws) and runs it once more.
  Reply eval_loading(const std::string& user, const std::vector<std::string>& keys,
                     const std::vector<std::string>& args);
  /// `freeze` or `unfreeze` (`op`).
  bool set_frozen(const char* op, const std::string& user, const std::string& reason, TimePoint at);
  /// The script call of one deduct or credit; throws on bad input.
  ScriptCall change_call(const char* op, const WalletOrder& order) const;
  std::vector<std::string> user_keys(const std::string& user, const std::string& order) const;
  /// Runs the loader for `user` once for all threads that miss it at the same time.
  void load_once(const std::string& user);
  /// `load_once`, with whatever it throws turned into the Error it returns (a loader's own
  /// exception becomes not_found, Outcome::not_sent, naming the user and its message).
  std::optional<Error> load_missing(const std::string& user);

  Redis redis_;
  WalletOptions options_;
  WalletKeys keys_;
  Loader loader_;
  std::mutex loading_mutex_;
  std::map<std::string, std::shared_future<void>> loading_;
};

} // namespace limitcounter
