#pragma once
// LimitCounter: period counters, limits, daily caps and rate limits (jobs 1 to 3 of
// docs/ARCHITECTURE.md).

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <memory>
#include <optional>

#include <limitcounter/batch.hpp>
#include <limitcounter/calendar.hpp>
#include <limitcounter/decision.hpp>
#include <limitcounter/dimension.hpp>
#include <limitcounter/keys.hpp>
#include <limitcounter/observer.hpp>
#include <limitcounter/redis.hpp>
#include <limitcounter/rule.hpp>
#include <limitcounter/transaction.hpp>
#include <limitcounter/usage.hpp>

namespace limitcounter {

/// The exhausted cache (LimitCounterOptions::exhausted_cache): once Redis denies a consume
/// or reserve because a window limit is full, this process denies further transactions on
/// that rule, window and dimension itself, without a round trip, for a bounded time.
///
/// It denies only what Redis would deny too given the `used` Redis reported: a full count
/// limit denies every transaction there; a full amount limit only an amount that does not fit
/// beside that `used` (a smaller one goes to Redis and may be allowed). An entry ends when room
/// may have been freed or the limit may no longer apply: after `max_staleness` (so a refund,
/// cancel or expired hold elsewhere in the fleet is seen within it), at the end of its window
/// (by the transaction's time), at `set_rules`, and at any refund, cancel or confirm that this
/// LimitCounter runs (whatever its outcome). While this process holds a reservation on a
/// counter (until its reservation_timeout), that counter's denials are not cached: the hold's
/// expiry would free room. Denials by per-transaction rules, by `check` (which does not
/// release expired holds), replays and degraded decisions are never remembered (a `check` may
/// still be answered from an entry a consume or reserve left). A cached denial is marked
/// `Decision::cached` and writes nothing in Redis (see there for what it means for retries);
/// a call of this process that ended Outcome::unknown is retried in Redis, not from the cache.
struct ExhaustedCacheOptions {
  bool enabled = false; ///< off by default: every decision goes to Redis
  /// How long a denial Redis gave is reused at most; > 0.
  std::chrono::milliseconds max_staleness{1000};
  /// Denials kept at most; the oldest makes room; >= 1. It bounds as well the counters this
  /// process holds reservations on and the ids whose outcome is unknown that the cache tracks.
  std::size_t max_entries = 10'000;
};

/// Settings of a LimitCounter.
struct LimitCounterOptions {
  /// Prepended to every key; see `CounterKeys`.
  std::string key_prefix = std::string(CounterKeys::default_prefix);
  /// The number of buckets each counter's dimensions are spread over (1..16384; see
  /// `CounterKeys`). 1, the default, keeps one hash per counter and window, `{<counter>}`;
  /// N > 1 puts dimension `d` in hash tag `{<bucket>:<counter>}`, bucket =
  /// `CounterKeys::bucket_of(d)`: smaller hashes (listpack-encoded, fewer bytes per counter)
  /// in N slots, spread statistically over the cluster masters (with M masters, N >= 16 * M
  /// puts some on every master in practice). Fixed per
  /// key prefix: every writer and reader of one prefix must use the same N (a reader with
  /// another N finds nothing; writers with another N count apart). Throws at construction of
  /// the LimitCounter (invalid_argument) outside 1..16384.
  std::uint32_t counter_buckets = 1;
  /// How long a window's key outlives the window's end, so that late reads, refunds and
  /// clocks a little behind still find it. The key expires at window end + grace.
  std::chrono::seconds window_grace{std::chrono::hours{1}};
  /// How long a reservation holds its quota unless confirmed or cancelled. On a Redis Cluster a
  /// confirm is decided at the transaction's home record by this timeout, and the holds in the
  /// counters' slots last `cluster_hold_grace` longer.
  std::chrono::milliseconds reservation_timeout{std::chrono::minutes{15}};
  /// On a Redis Cluster, how much longer the holds in the counters' slots last than
  /// `reservation_timeout`, so that a confirm the home record took reaches them before another
  /// caller's reserve can release them as expired (docs/ARCHITECTURE.md, "Hold expiry on a
  /// cluster"); an abandoned reservation holds its quota that much longer. Unset (the default):
  /// max(30 s, 10 * `RedisOptions::command_timeout`). 0 gives the race back (tests of expiry
  /// timing only). Throws at construction of the LimitCounter (invalid_argument) if negative.
  std::optional<std::chrono::milliseconds> cluster_hold_grace;
  /// The replay horizon: how long a transaction's record is kept after its decision, whatever
  /// its windows (a reservation's record is kept until its windows' keys expire, so that its
  /// hold is released however late). A confirm, cancel, refund or void keeps the record it
  /// changes at least ten minutes more, so that its resend after a lost reply replays. Must be
  /// positive and at least `reservation_timeout` (invalid_argument at construction otherwise).
  /// Within it, the same id replays the first decision, and confirm, cancel and refund need
  /// only the id; after it, the id is forgotten: the same id is decided anew, and a refund
  /// needs the original transaction (the overloads taking a `Transaction`). Also how long a
  /// cancel of an unknown id keeps that id from being reserved, and how long a correction's id
  /// is remembered (`adjust`). A record takes about 136-168 bytes of Redis memory
  /// (docs/BENCHMARKS.md). A call whose record would already have expired by the server's clock
  /// when it runs (a horizon shorter than the call's budget plus how far this host's clock is
  /// behind Redis's) is refused, nothing written (server_error, Outcome::failed): keep it
  /// minutes or more.
  std::chrono::milliseconds replay_horizon{std::chrono::hours{24}};
  /// A transaction dated more than this after the local clock is refused (invalid_argument,
  /// nothing sent): a wrong clock or a bad date must not open next year's windows. Empty:
  /// no check (for replaying history or tests that date transactions ahead).
  std::optional<std::chrono::milliseconds> max_future_skew{std::chrono::minutes{5}};
  /// Hooks for metrics (decisions, near-limit events, errors, latency); none by default.
  std::shared_ptr<LimitObserver> observer;
  /// An allowed transaction that leaves a window at or above this share of a limit is
  /// reported to `observer->on_near_limit`.
  double near_limit_fraction = 0.9;
  /// Denials of full window limits decided in this process for a bounded time; off by
  /// default (see `ExhaustedCacheOptions`).
  ExhaustedCacheOptions exhausted_cache;
  /// Concurrent consumes merged (standalone Redis): at most this many of this LimitCounter's
  /// `consume` calls wait for Redis at once. A `consume` that comes while that many wait is
  /// queued, and the next caller to find a place sends every queued one (up to 64, oldest
  /// first) in one script call that decides each transaction on its own, as `consume_many`
  /// does: each is all or nothing and idempotent by its id, and two calls of one id in the same
  /// script call are one first decision and one replay. Redis then pays its cost per command
  /// (the event loop, reading and writing: most of a single consume's CPU, docs/BENCHMARKS.md)
  /// once per script call instead of once per transaction. A caller that finds
  /// a place is sent at once, as its own script call, so a lone caller is never delayed and
  /// nothing changes below this many concurrent consumes. When such a merged script call fails
  /// as a whole (an error reply, a lost reply), each of its consumes throws Outcome::unknown
  /// (retry with the same id; nothing is decided by a failure policy) or, when nothing was
  /// sent, Outcome::not_sent as a single consume would. Unset (the default): 1, so a consume that
  /// comes while another is in flight waits for that call's reply (at most one round trip; a
  /// lone caller never waits) and goes with every consume queued meanwhile: from 16 threads a
  /// 1-rule consume costs Redis less CPU than a record-less limiter's call, a 4-rule one about
  /// as much, and less from 64 threads (docs/BENCHMARKS.md, "16 threads calling consume").
  /// A host that would rather spend Redis CPU than that wait sets `RedisOptions::pool_size`
  /// (merged only when a connection would be waited for anyway). 0: never merged. On a Redis
  /// Cluster, unset is `RedisOptions::pool_size`: a consume there is three steps over several
  /// masters, and one in flight would run them one consume at a time (4 threads then decided
  /// about as many consumes a second as 1: docs/BENCHMARKS.md, "Merged consumes on a cluster"). The
  /// merged consumes are decided together as `consume_many` decides (each step, begin, shares and
  /// finish, of all of them in one pipeline; a slot's shares in one script call): a reply lost past
  /// the resends
  /// (`RedisOptions::retry`) is unknown for each of them whose call of that step went to that
  /// node, a call not sent falls to its consume's failure
  /// policy. Ignored by `reserve` and `check`.
  std::optional<std::size_t> consume_in_flight;
};

/// One add of `LimitCounter::add_many`: the arguments of one `add` call.
struct AddRequest {
  std::string counter;         ///< the counter family, e.g. "channel"
  Dimension dimension;         ///< what to count under it
  std::vector<Period> periods; ///< one window each, no period twice
  std::int64_t count = 1;      ///< transactions to add, in [0, 2^53)
  std::int64_t amount = 0;     ///< minor units to add, in [0, 2^53)
  TimePoint at = Clock::now(); ///< picks the windows
};

/// The outcome of `refund`.
struct RefundResult {
  /// Given back by this refund id (by its first call, also when this call is a replay).
  std::int64_t refunded_now = 0;
  std::int64_t refunded_total = 0; ///< given back so far, by every refund of the transaction
  std::int64_t consumed = 0;       ///< the transaction's consumed amount
  /// True when this refund id had been applied before (a retry): nothing moved now.
  bool replayed = false;
};

/// The outcome of `confirm`.
struct ConfirmResult {
  /// True when the reservation had been confirmed before (a retry, or another caller's
  /// confirm of the id): `amount` is that confirm's final amount, nothing changed now.
  bool replayed = false;
  std::int64_t amount = 0;   ///< the final amount
  std::int64_t released = 0; ///< hold given back by this call (held - final; 0 when replayed)
};

/// The outcome of `take_daily_cap`.
struct CapDecision {
  /// Whether the take went ahead.
  enum class Verdict {
    allowed, ///< taken and counted
    refused, ///< the day's cap has no room for it; nothing counted
  };
  Verdict verdict = Verdict::refused; ///< see `Verdict`
  std::int64_t used = 0;              ///< used today, after this call
  std::int64_t remaining = 0;         ///< still allowed today
  Window window; ///< the day (in the calendar's zone); the cap resets at its end

  /// `verdict == Verdict::allowed`.
  bool allowed() const noexcept { return verdict == Verdict::allowed; }
};

/// One take of `LimitCounter::take_daily_cap_many`: the arguments of one `take_daily_cap`.
struct CapRequest {
  std::string cap;              ///< the cap's name, a key part (e.g. "sms")
  std::string subject;          ///< who is capped, a key part (e.g. an account id)
  std::int64_t max_per_day = 0; ///< >= 0, per day of the calendar's zone
  TimePoint at = Clock::now();  ///< picks the day, in the calendar's zone
  std::int64_t n = 1;           ///< how many to take, >= 1
};

/// One hit of `LimitCounter::hit_sliding_window_many`: the arguments of one
/// `hit_sliding_window`.
struct SlidingRequest {
  std::string limiter;                 ///< the limiter's name, a key part
  std::string subject;                 ///< who is limited, a key part
  std::int64_t max = 0;                ///< admitted requests per window, >= 1
  std::chrono::milliseconds window{0}; ///< the window's length, >= 1 ms
  TimePoint at = Clock::now();         ///< the request's time (ms precision)
};

/// The outcome of `hit_sliding_window`.
struct SlidingDecision {
  /// Whether the request was admitted.
  enum class Verdict {
    allowed, ///< admitted and recorded
    refused, ///< the window is full; the request is not recorded
  };
  Verdict verdict = Verdict::refused; ///< see `Verdict`
  std::int64_t used = 0;              ///< admitted requests in the window, after this call
  std::int64_t remaining = 0;         ///< how many more fit now
  TimePoint retry_at;                 ///< when the oldest admitted request leaves the window

  /// `verdict == Verdict::allowed`.
  bool allowed() const noexcept { return verdict == Verdict::allowed; }
};

/// One transaction whose fan-out `LimitCounter::finish_interrupted` finished.
struct InterruptedFanOut {
  std::string transaction_id; ///< the transaction's id
  /// The home record's state its shares now follow: voided for a consume or reserve begun and
  /// never finished (abandoned), else denied, confirmed, expired, cancelled or consumed (a
  /// refund).
  TransactionState state = TransactionState::none;
  /// True when this sweep ended a consume or reserve that was begun and never finished: what
  /// its shares had taken was given back, and a retry of its id replays Verdict::cancelled.
  bool abandoned = false;
  /// Share operations (void, confirm, cancel, refund) that changed a share now.
  std::size_t shares_changed = 0;
  /// Shares whose hold had been released as expired before they could follow the home
  /// record's confirm: their counters no longer count the transaction, and no retry mends
  /// that (correct them with `LimitCounter::adjust`). The home record is left open, so every
  /// sweep reports it again until the record expires.
  std::size_t shares_lost = 0;
  /// Shares with no record to follow a refund with: the refund was recorded anew past the
  /// replay horizon (`refund` with the original transaction) and its fan-out did not reach
  /// them, so they still count what it gave back elsewhere. Only that refund retried with the
  /// original gives back there; the home record is left open, so every sweep reports it again
  /// until the retry (or until the record expires).
  std::size_t shares_without_record = 0;
};

/// The outcome of `cancel`.
struct CancelResult {
  /// What ended the reservation.
  enum class Status {
    /// a cancel: the reservation's hold was released (by this call, or before when `replayed`)
    cancelled,
    /// the hold had run out (or its record is gone, for `cancel(original)`) before any
    /// cancel; the timeout released it and this call changed nothing; never `replayed`
    expired,
    /// the id was unknown: recorded, so a later reserve of it is refused
    /// (Decision::Verdict::cancelled)
    recorded_unknown,
  };
  Status status = Status::cancelled; ///< see `Status`
  /// True when the id had been cancelled before: by an earlier cancel (a retry after a lost
  /// reply, or another caller's; one that recorded the id unknown too), or on a Redis Cluster
  /// by `LimitCounter::finish_interrupted` abandoning its reserve. `status` is then cancelled
  /// and nothing changed now.
  bool replayed = false;
};

/// An operator's correction of a counter (`LimitCounter::adjust`).
struct CounterCorrection {
  /// The idempotency id, a key part (':' allowed): a retry with the same id and content
  /// applies nothing twice.
  std::string id;
  std::int64_t count = 0;  ///< transactions to add (negative: to remove), |count| < 2^53
  std::int64_t amount = 0; ///< minor units to add (negative: to remove), |amount| < 2^53
  std::string author; ///< who corrects: 1 to 256 bytes of display text (`validate_display_text`)
  std::string reason; ///< why: 1 to 256 bytes of display text (required)
};

/// The outcome of `LimitCounter::adjust`.
struct CorrectionResult {
  Window window;         ///< the window corrected
  Usage before;          ///< the dimension's usage before the correction
  Usage after;           ///< and after it
  std::string audit_id;  ///< the entry in the audit stream (`CounterKeys::audit`)
  bool replayed = false; ///< the id was applied before: its first result, nothing moved now
};

/// A limits transaction's record as stored in Redis (`LimitCounter::transaction_record`).
struct TransactionRecord {
  /// consumed | denied | reserved | confirmed | cancelled | expired (a reservation that timed
  /// out), voided (a share undone because another slot denied, or a home record the cluster
  /// sweep abandoned, see `LimitCounter::finish_interrupted`), pending (a cluster decision
  /// under way), or tombstone (a cancel that came before its reserve); never none.
  TransactionState state = TransactionState::none;
  std::int64_t amount = 0;   ///< consumed or held, minor units
  std::int64_t refunded = 0; ///< given back so far
  /// The first decision: its verdict and denial (`rules` empty: no record keeps a counter's
  /// totals). Empty for a tombstone.
  std::optional<Decision> decision;
  /// The refunds, refund id ("" for the full refund) -> amount given back.
  std::vector<std::pair<std::string, std::int64_t>> refunds;
  /// The counter window keys the transaction moved (of every share on a cluster; a share
  /// voided because another slot denied gave back what it took and is left out).
  std::vector<std::string> counter_keys;
  /// When it was decided (the deciding call's clock; the windows in `decision` say which
  /// periods the transaction's own time fell in). Empty for a tombstone and for the compact
  /// records of standalone Redis and of a cluster's shares, which keep no time.
  std::optional<TimePoint> decided_at;
  std::optional<TimePoint> hold_expires; ///< a reservation's hold expiry
  std::optional<TimePoint> expires_at;   ///< when the record expires (the replay horizon)
  std::vector<std::string> records;      ///< the Redis keys read (home record first)
};

/// Counts transactions and amounts per dimension per period window, in Redis, in the
/// calendar's time zone. Thread-safe; share one instance across threads.
///
/// Every call is one round trip. Errors throw `Error`: bad input (invalid_argument,
/// precision_overflow, window_closed) before anything is sent; Redis failures as
/// described at `Redis`.
class LimitCounter {
public:
  /// Sends nothing and has no rules until `set_rules`. Windows are cut in `calendar`'s zone.
  /// Throws `Error` (invalid_argument) for a bad key prefix or a negative window_grace.
  LimitCounter(Redis redis, Calendar calendar, LimitCounterOptions options = {});
  ~LimitCounter();
  /// Neither copyable nor movable: one instance is shared by the threads that use it (a move
  /// would leave them an empty one). Hold it by `std::shared_ptr` to share or hand it over, as
  /// `RuleFollower` takes it.
  LimitCounter(const LimitCounter&) = delete;
  LimitCounter& operator=(const LimitCounter&) = delete;
  LimitCounter(LimitCounter&&) = delete;
  LimitCounter& operator=(LimitCounter&&) = delete;

  /// Adds `count` transactions and `amount` minor units to `dimension` of `counter` in the
  /// window of each of `periods` that contains `at`, atomically (all windows or none),
  /// and returns the totals after the add, one per period in the order given.
  ///
  /// `counter` names the family of counters (e.g. "channel"); it is a key part that may
  /// contain '+'. `count` and `amount` must be in [0, 2^53); a total that would reach
  /// 2^53 throws precision_overflow and nothing is written. A window whose end + grace
  /// has passed throws window_closed (its key would expire at once). Not idempotent, so
  /// never resent by the library after a lost reply (`RedisOptions::retry` does not apply):
  /// a retry after Outcome::unknown may count twice (use the limits API for that).
  std::vector<WindowUsage> add(std::string_view counter, const Dimension& dimension,
                               const std::vector<Period>& periods, std::int64_t count,
                               std::int64_t amount, TimePoint at = Clock::now());

  /// Runs many independent `add`s pipelined on one connection (one round trip for the batch)
  /// and returns one result per request, in order. Each add is atomic on its own; the batch
  /// is not. Bad input anywhere throws before anything is sent. Not idempotent, as `add`:
  /// never resent by the library after a lost reply.
  std::vector<BatchResult<std::vector<WindowUsage>>>
  add_many(const std::vector<AddRequest>& requests);

  /// The usage of `dimension` of `counter` in the window of `period` containing `at`
  /// (zero if nothing was counted or the window's key has expired).
  Usage usage(std::string_view counter, const Dimension& dimension, Period period,
              TimePoint at = Clock::now());

  // ---- Listing (for operators and reconciliation; src/limit_counter/listing.cpp) ----

  /// One dimension of a window and what it holds.
  struct DimensionUsage {
    Dimension dimension; ///< the dimension (the hash field, split)
    Usage usage;         ///< its count and amount in the window
  };
  /// One page of `dimensions`.
  struct DimensionPage {
    Window window;                          ///< the window of `period` containing `at`
    std::vector<DimensionUsage> dimensions; ///< this page's dimensions, in no order
    std::string cursor;                     ///< pass it to the next call; "0" when done
    /// The last page: `cursor` is "0".
    bool done() const noexcept { return cursor == "0"; }
  };
  /// Lists the dimensions counted in `counter`'s window of `period` containing `at`, a page at
  /// a time, without changing anything: start with cursor "0", pass each page's `cursor` to the
  /// next call, stop when `done()`. It is Redis's HSCAN of the window's hash, with its
  /// guarantees: a dimension present from the first call to the last is listed at least once,
  /// and may be listed twice (de-duplicate by dimension when that matters); one added or
  /// expired meanwhile may or may not be. `count` (1 to 10,000) is a hint for the page size;
  /// a small window comes back whole in one page. With `counter_buckets` N > 1 the hashes of
  /// buckets 0..N-1 are scanned in turn (one HSCAN per bucket at least, on that bucket's node)
  /// until a page has `count` dimensions, and the cursor is "<bucket>:<HSCAN cursor>". An
  /// expired or empty window is one empty page, done. Throws invalid_argument for a bad counter
  /// name, cursor (one that is not this bucket count's) or count (nothing sent);
  /// protocol_error for a field this library did not write.
  DimensionPage dimensions(std::string_view counter, Period period, TimePoint at = Clock::now(),
                           std::string_view cursor = "0", std::int64_t count = 100);

  /// What a subject has used of a daily cap.
  struct CapUsage {
    std::int64_t used = 0; ///< taken on that day
    Window window;         ///< the day (in the calendar's zone); the cap resets at its end
  };
  /// What `subject` has used of cap `cap` on the day containing `at` (calendar's zone), read
  /// without taking anything: the `used` of the last `take_daily_cap` of that day, 0 if none.
  /// Throws invalid_argument for a bad cap name or subject (nothing sent).
  CapUsage cap_usage(std::string_view cap, std::string_view subject, TimePoint at = Clock::now());

  // ---- Operator calls (src/limit_counter/operations.cpp) ----

  /// Corrects `dimension` of `counter` in the window of `period` containing `at` by
  /// `correction.count` and `correction.amount` (either may be negative), and appends an
  /// audit entry (id, counter, period, window, dimension, before and after as
  /// "<count>:<amount>", author, reason, at = now in unix ms) to
  /// `keys().audit(keys().tag(counter, dimension.field()))` (the dimension's bucket), in
  /// one script: the counter moves if and only if its entry is written. Idempotent by
  /// `correction.id` while its record lives (until the window's end + `window_grace` or
  /// `replay_horizon` after now, whichever is later; then the id is forgotten): a retry (e.g. after
  /// Outcome::unknown) returns the first result with `replayed`; the same id with other content
  /// throws conflict (Outcome::failed). Throws invalid_argument for a bad counter, id, author or
  /// reason, both deltas 0, or a total it would leave below 0; precision_overflow for a delta or
  /// total past 2^53 - 1; window_closed for a window whose key has expired (as `add`). Nothing is
  /// written when it throws. Counts it adds are not transactions: they have no record to
  /// refund.
  CorrectionResult adjust(std::string_view counter, const Dimension& dimension, Period period,
                          const CounterCorrection& correction, TimePoint at = Clock::now());

  /// The record of limits transaction `transaction_id` (reads only; nothing is replayed or
  /// released): empty when Redis has none (never decided, or past its replay horizon). On a
  /// Redis Cluster it reads the home record `<prefix>tx:{id}` and the share records of its
  /// plan. `counters` is validated and otherwise unused: it found the one-slot records of
  /// earlier versions, whose record format this version does not read (CHANGELOG). Throws
  /// invalid_argument for a bad id or counter name (nothing sent).
  std::optional<TransactionRecord>
  transaction_record(const std::string& transaction_id,
                     const std::vector<std::string>& counters = {});

  // ---- Limits (job 2 of docs/ARCHITECTURE.md) ----

  /// Replaces the rules, atomically for concurrent callers. Counters are kept: a rule's
  /// counters belong to its shape and period, not to the rule. Until it is called,
  /// consume, reserve and check throw invalid_argument; an empty RuleSet set here allows
  /// every transaction (and records it) on purpose.
  /// Same as `set_rules(rules, 0)`: rules set in code, without a version.
  void set_rules(RuleSet rules);
  /// Replaces the rules as `set_rules(RuleSet)` does and names their version (e.g. of a
  /// `RuleStore`): every Decision decided by them reports it in `rule_set_version`. The rules
  /// and their version change together: no call decides by one with the other.
  void set_rules(RuleSet rules, std::uint64_t version);
  /// The version given with the rules in force (0 before `set_rules` or without a version).
  std::uint64_t rule_set_version() const;
  /// The rules in force (empty before `set_rules`).
  std::shared_ptr<const RuleSet> rules() const;

  /// Checks `transaction` against every applicable rule and, only if all have room,
  /// counts it in every one of their windows: all or nothing, one round trip. A denial is
  /// a Decision, not an exception. Idempotent by transaction id: a repeat returns the first
  /// decision (`replayed`) and changes nothing, also when sent concurrently; the same id
  /// with another amount or attributes throws conflict. Per-transaction rules ("a single
  /// transaction at most X") are decided and recorded by the same script, so their denial
  /// replays too. A lost reply is never a failure-policy decision: the library sends the same
  /// call again (`RedisOptions::retry`), which returns what Redis decided, marked `replayed`
  /// when the first send ran; Outcome::unknown reaches the caller only when those resends are
  /// spent, and its retry with the same id returns what Redis decided. On a Redis Cluster, a
  /// transaction spread over several slots takes steps (begin, shares, finish): each is resent
  /// the same way, within one `retry` budget and `max_attempts` for the whole call.
  ///
  /// Failure policies (Rule::on_redis_failure) decide only a call that was not sent
  /// (Outcome::not_sent); the decision is `degraded`. Throws invalid_argument for a bad id,
  /// amount or attribute, a transaction dated past `max_future_skew`, or no `set_rules`
  /// yet; window_closed when a window it would count in has ended more than the grace ago
  /// (as `add`); nothing is sent then.
  ///
  /// With `LimitCounterOptions::exhausted_cache` on, a denial may come from this process
  /// (`Decision::cached`: nothing sent, nothing recorded): it is not the id's decision, so a
  /// host that needs what Redis decided for an id (e.g. one it sent before) retries it after
  /// `max_staleness`, when Redis answers (a replay if Redis had decided it).
  ///
  /// A consume made while `LimitCounterOptions::consume_in_flight` others of this LimitCounter
  /// wait for Redis goes in one script call with the consumes queued with it (on a Redis
  /// Cluster: is decided with them as `consume_many` decides): the same decision and
  /// idempotency; an error reply of that call is Outcome::unknown.
  Decision consume(const Transaction& transaction);

  /// Runs many independent `consume`s in one round trip and returns one result per transaction,
  /// in order (a conflict is that item's Error). On standalone Redis one script call decides up
  /// to 64 of them (an id repeated in the batch replays the first). On a Redis Cluster every item
  /// goes through its home record in three steps, each step of all items in one pipeline (one
  /// per node): every begin, then every share (the shares of one slot in script calls of up to
  /// 64), then every finish; three round trips for the batch. As with concurrent callers, an
  /// item's share may then see what another item's share in another slot took before that item
  /// was denied and gave it back (never more than the limits allow). Each consume is all or
  /// nothing on its own and idempotent by its id; the batch is not atomic. Each item is decided
  /// as `consume` would: its failure policy when its call was not sent (its node down, or
  /// behind an open breaker: the other nodes' items go on), Outcome::unknown (retry with the
  /// same ids) when its call may have run (every item whose call of a step went to a node whose
  /// reply stayed lost through the resends, which the whole batch shares, or into a script call
  /// of several of them that answered with an error; one alone in its call gets Outcome::failed
  /// there, as `consume`), the local fallback
  /// reported after.
  /// Bad input anywhere throws before anything is sent.
  std::vector<BatchResult<Decision>> consume_many(const std::vector<Transaction>& transactions);

  /// Like `consume`, but holds the quota for `reservation_timeout`: the hold counts against
  /// every limit until `confirm` makes it final or `cancel` (or the timeout) releases it.
  /// A hold that timed out stays in the counters (and in `usage`) until it is released: by
  /// the next reserve on its counters' shape, or by a consume that it would otherwise deny
  /// (the consume then decides again without it). So an expired hold never denies anything,
  /// and a consume with room pays nothing for the sweep.
  Decision reserve(const Transaction& transaction);

  /// Decides as `consume` would, without counting anything (a peek). A peek releases no
  /// expired hold, so it may count one that `consume` would release (see `reserve`).
  Decision check(const Transaction& transaction);

  /// Makes a reservation final at `final_amount` (default: all of it; at most what is held)
  /// and releases the rest. Idempotent: a repeat changes nothing and returns the first confirm's
  /// amount with `replayed`. Throws not_found for an unknown id, conflict if the
  /// reservation was cancelled or expired (its hold is gone) or was a consume, and
  /// invalid_argument if `final_amount` is more than held.
  ConfirmResult confirm(const std::string& transaction_id,
                        std::optional<std::int64_t> final_amount = std::nullopt);
  /// `confirm(original.id, final_amount)` for a host that keeps its transactions (`original`
  /// as reserved): when the record is gone it throws conflict (expired: a hold never outlives
  /// its record) instead of not_found, and while the record lives, an original it was not
  /// decided for (other attributes or amount) throws conflict. Throws as `consume` for a bad
  /// transaction. On a Redis Cluster the same holds (the home record is compared; one more
  /// round trip).
  ConfirmResult confirm(const Transaction& original,
                        std::optional<std::int64_t> final_amount = std::nullopt);

  /// Releases a reservation's hold. Idempotent: a repeat changes nothing and answers
  /// `cancelled` with `replayed`. Cancelling an unknown id records it, so a reserve that
  /// arrives later with that id is refused (Decision::Verdict::cancelled).
  /// Throws conflict for a consumed or confirmed transaction (refund it instead).
  CancelResult cancel(const std::string& transaction_id);
  /// `cancel(original.id)` for a host that keeps its transactions (`original` as reserved):
  /// when the record is gone it answers `expired` (the hold expired long ago) instead of
  /// recording the id, and while the record lives, an original it was not decided for throws
  /// conflict. Throws as `consume` for a bad transaction. On a Redis Cluster the same holds
  /// (one more round trip).
  CancelResult cancel(const Transaction& original);

  /// Gives quota back to exactly the windows the transaction was counted in (a December
  /// refund of a November payment goes to November). Without `amount`: everything not yet
  /// refunded, and the count (`refund_id` is not used then); a repeat replays the first
  /// full refund. With `amount`: that much, once per `refund_id` (required then): a repeat
  /// of the id with the same amount replays it (`replayed`, nothing moves), with another
  /// amount throws conflict. So a refund is safe to retry after Outcome::unknown. Never
  /// more than consumed (more throws invalid_argument), never below zero. Throws not_found
  /// for an unknown id (never decided, or decided before the replay horizon: then refund with
  /// the original transaction), conflict for a transaction that is reserved, denied or
  /// cancelled.
  RefundResult refund(const std::string& transaction_id,
                      std::optional<std::int64_t> amount = std::nullopt,
                      const std::string& refund_id = {});
  /// `refund` of the transaction the host kept: its id, time and attributes, and as `amount`
  /// what was consumed (for a reservation, the amount confirmed; while the record lives the
  /// reserved amount is accepted too). While its record lives, the record decides, as
  /// `refund(original.id, ...)`, and an original it was not decided for (other attributes or
  /// amount) throws conflict. After the replay horizon, when the record is gone, the counters
  /// of `original` under the rules in force now are given back (in the windows of
  /// `original.time`; windows whose keys have expired are left alone), and a new record keeps
  /// the refund for another horizon, so its retries replay. The library no longer knows the
  /// refunds made before: refund what is left with an explicit `amount` (the count then stays
  /// counted); a full refund gives back `original.amount` and the count. Throws as
  /// `refund(original.id, ...)`, and as `consume` for a bad transaction. On a Redis Cluster the
  /// same holds (one more round trip): past the horizon the home record is recorded anew under
  /// the shares the rules in force give `original`, and each share gives back its part; a
  /// refund interrupted there throws Outcome::unknown and its retry with the same original
  /// finishes it (the sweep, which does not have the original, cannot).
  RefundResult refund(const Transaction& original,
                      std::optional<std::int64_t> amount = std::nullopt,
                      const std::string& refund_id = {});

  /// The sweep of a Redis Cluster (src/limit_counter/cluster/sweep.cpp): finishes, without a retry
  /// by the host, the fan-outs of transactions spread over several slots that a crash, a cut
  /// connection or a host that never retried left unfinished, and returns what it changed
  /// (at most `max` transactions; call it again while it returns `max`).
  ///
  /// It SCANs every master for this counter's home records (`<prefix>tx:*`) and takes those
  /// whose last change is at least `older_than` old by the server's clock:
  /// - a consume or reserve begun and never finished (no caller was told its decision, so no
  ///   host acted on it) is **abandoned**: its home record becomes "voided" by compare-and-set
  ///   and what its shares took is given back. A host that retries the id later gets
  ///   Verdict::cancelled (replayed, state voided): the payment did not happen; use a new id.
  /// - a denial whose voids, or a confirm, cancel or refund whose shares did not all follow, is
  ///   finished exactly as a retry of it would: every share is brought to the home record's
  ///   state, each operation idempotent.
  /// A transaction whose shares had all followed is not reported. Running it again (or
  /// concurrently, on several hosts) changes nothing twice. `older_than` must exceed the longest
  /// time a call may take between its begin and its finish (see `RedisOptions::call_budget`;
  /// a minute is ample), so that a call still running is never abandoned. The SCAN reads every
  /// key of this prefix on every master: run it now and then (every few minutes), not per call.
  /// On standalone Redis it returns nothing (one record, no fan-out). Throws invalid_argument
  /// for an `older_than` below 0 or from 2^53 ms, or a `max` of 0 (nothing sent). A lost reply
  /// is sent again within `RedisOptions::retry` (taking a record again hands over what the
  /// first take did); a Redis failure past that throws as described at `Redis`, leaving the
  /// unfinished transactions for the next sweep.
  std::vector<InterruptedFanOut> finish_interrupted(std::chrono::seconds older_than,
                                                    std::size_t max = 100);

  // ---- Caps and rate limits (job 3 of docs/ARCHITECTURE.md) ----

  /// Takes `n` (default 1) from `subject`'s cap `cap` of `max_per_day` for the day containing
  /// `at`, in the calendar's zone: "account a1 sends at most 1000 SMS a day". Over the cap,
  /// refuses without counting. One round trip; the day's key expires at the day's end plus
  /// the grace. `cap` and `subject` are key parts; `max_per_day` >= 0, `n` >= 1. Not
  /// idempotent, so never resent by the library after a lost reply (`RedisOptions::retry` does
  /// not apply): a retry after Outcome::unknown may take twice.
  CapDecision take_daily_cap(std::string_view cap, std::string_view subject,
                             std::int64_t max_per_day, TimePoint at = Clock::now(),
                             std::int64_t n = 1);

  /// Runs many independent `take_daily_cap`s pipelined on one connection (one round trip)
  /// and returns one result per request, in order. Each take is atomic on its own; the
  /// batch is not: takes of the same subject apply in the order given. Bad input anywhere
  /// throws before anything is sent (invalid_argument, window_closed); a Redis failure
  /// throws for the whole batch as described at `Redis::eval_pipeline`. Not idempotent, as
  /// `take_daily_cap` (never resent by the library): a batch retried after Outcome::unknown
  /// may take twice.
  std::vector<BatchResult<CapDecision>>
  take_daily_cap_many(const std::vector<CapRequest>& requests);

  /// Admits a request of `subject` under `limiter` if fewer than `max` were admitted in the
  /// `window` before `at` ("at most 10 in any 60 s"); exact under concurrency. Refused
  /// requests are not recorded; memory is at most `max` entries per subject and expires
  /// after `window` of quiet. `max` >= 1, `window` >= 1 ms. Not idempotent (each hit is a new
  /// member), so never resent by the library after a lost reply: Outcome::unknown may have
  /// counted it.
  SlidingDecision hit_sliding_window(std::string_view limiter, std::string_view subject,
                                     std::int64_t max, std::chrono::milliseconds window,
                                     TimePoint at = Clock::now());

  /// Runs many independent `hit_sliding_window`s pipelined on one connection (one round
  /// trip) and returns one result per request, in order; errors and retries as
  /// `take_daily_cap_many` (each hit has its own member, so a retried hit counts again).
  std::vector<BatchResult<SlidingDecision>>
  hit_sliding_window_many(const std::vector<SlidingRequest>& requests);

  /// The calendar given at construction.
  const Calendar& calendar() const noexcept;
  /// The key names this counter uses.
  const CounterKeys& keys() const noexcept;

private:
  class Impl; // src/limit_counter/limit_counter_impl.hpp
  std::unique_ptr<Impl> impl_;
};

} // namespace limitcounter
