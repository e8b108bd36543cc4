#pragma once
// RedPacketPool: red packets split in advance, grabbed atomically, paid out through a
// reliable queue (job 5 of docs/ARCHITECTURE.md).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <limitcounter/batch.hpp>
#include <limitcounter/calendar.hpp>
#include <limitcounter/observer.hpp>
#include <limitcounter/red_packet_keys.hpp>
#include <limitcounter/red_packet_split.hpp>
#include <limitcounter/redis.hpp>

namespace limitcounter {

/// Settings of a RedPacketPool.
struct RedPacketOptions {
  std::string key_prefix = std::string(RedPacketKeys::default_prefix); ///< see `RedPacketKeys`
  /// Payout-queue partitions; a packet's keys live with its partition (one cluster slot).
  /// Every process of the host must use the same number.
  std::uint32_t partitions = 16;
  /// How long a packet's keys (and its draws) are kept after it expires; positive. Run
  /// `close_expired` well within it: a packet whose keys are gone has no leftover to return.
  std::chrono::milliseconds retention{std::chrono::hours{24 * 7}};
  /// How long a worker may hold a payout task before it is handed to another worker.
  std::chrono::milliseconds visibility_timeout{std::chrono::seconds{30}};
  /// Payout attempts before a task goes to the dead-letter list.
  int max_payout_attempts = 5;
  /// Back-off after the first failed payout; doubles with every further failure.
  std::chrono::milliseconds payout_backoff{std::chrono::seconds{1}};
  /// Hooks for metrics: every create, grab (each item of grab_many), close and payout-queue
  /// call is reported to `observer->on_red_packet_operation` or `on_payout_operation`
  /// (status and latency), its errors to `on_error` too; none by default.
  std::shared_ptr<LimitObserver> observer{};
};

/// The rules of one packet at creation. They are part of the packet's content: a create
/// retried with the same id must pass the same options (the same `expires_at`, not a fresh
/// `Clock::now()`), else it is a conflict.
struct PacketOptions {
  /// When grabbing ends; after it, `close` returns what is left.
  TimePoint expires_at = Clock::now() + std::chrono::hours{24};
  /// Grabs per user that win nothing (sold_out) before that user is answered
  /// too_many_attempts. A user who won is never refused: every later grab is `granted` with
  /// `replayed`.
  int max_attempts_per_user = 10;
};

/// The answer to `create`.
struct CreateResult {
  /// True if this call completed the packet (it was not grabbable before the call).
  bool created_now = false;
  /// True if an earlier call with the same id and content had begun (or completed) it: this
  /// call is a retry. Both are true when this call finished a create that was cut off.
  bool replayed = false;
  /// Chunks of at most `RedPacketPool::chunk_amounts` amounts this call stored.
  std::size_t chunks_stored = 0;
};

/// What a grabber shows to the others (kept with the draw and the payout task). Each field is
/// at most `RedPacketPool::max_display_bytes` bytes of display text (`validate_display_text`:
/// valid UTF-8 without C0 or C1 controls, U+2028 or U+2029); both may be empty.
struct UserDisplay {
  std::string nickname;   ///< the name shown
  std::string avatar_url; ///< the picture shown
};

/// One grab of `grab_many`.
struct GrabRequest {
  std::string user_id; ///< the grabber, a key part
  UserDisplay display; ///< kept with the draw and the payout task
};

/// The answer to a grab.
struct GrabResult {
  /// What the grab did.
  enum class Status {
    /// a packet was popped for this user and its payout queued (by this grab, or before when
    /// `replayed`)
    granted,
    sold_out,          ///< no packet left (counts one attempt that won nothing)
    expired,           ///< past the expiry or closed (not counted as an attempt)
    too_many_attempts, ///< the user, who never won, reached the attempt cap
  };
  Status status = Status::sold_out; ///< see `Status`
  std::int64_t amount = 0;          ///< for granted, minor units
  /// True when the user had won before (a retry after a lost reply, or any later grab of a
  /// winner): `status` is granted with the amount won then; nothing moved now.
  bool replayed = false;
};

/// The answer to `close`.
struct CloseResult {
  /// True if this call closed the packet; false if an earlier call had.
  bool closed_now = false;
  /// True if an earlier call had closed it (a retry, e.g. after a lost reply): `leftover` and
  /// `packets_left` are those that close stored.
  bool replayed = false;
  /// close_expired only: the packet's keys were gone (its retention passed before it was
  /// closed); its leftover is unknown and its id was dropped from the expiry index.
  bool gone = false;
  /// The amount never grabbed, minor units. The same on every close of the packet (replays
  /// included): return it to the sender idempotently by packet id.
  std::int64_t leftover = 0;
  std::int64_t packets_left = 0; ///< packets never grabbed
};

/// One payout a worker must make.
struct PayoutTask {
  std::string packet_id;       ///< the packet grabbed
  std::string user_id;         ///< the grabber to pay
  std::int64_t amount = 0;     ///< minor units, > 0
  int attempt = 1;             ///< 1 for the first try
  std::uint32_t partition = 0; ///< the payout-queue partition it was taken from
  std::uint64_t lease = 0;     ///< guards ack, fail and release: a stale lease changes nothing
  std::string nickname;        ///< the grabber's display data, as given to `grab`
  std::string avatar_url;      ///< the grabber's avatar URL, as given to `grab`
  /// "<packet>:<user>": the same for every attempt, for the host's idempotent payout.
  std::string idempotency_key() const { return packet_id + ":" + user_id; }
};

/// Where a packet stands (`PacketStatus::state`).
enum class PacketState {
  creating, ///< not every chunk is stored yet (not ready)
  open,     ///< ready and not past `expires_at`: grabbable
  expired,  ///< past `expires_at`, not closed yet
  closed,   ///< closed (by `close` or `close_expired`)
};

/// "creating", "open", "expired" or "closed".
std::string_view to_string(PacketState state) noexcept;

/// A packet as `RedPacketPool::status` reads it (for operators).
struct PacketStatus {
  std::int64_t total = 0;        ///< the amount split, minor units
  std::int64_t count = 0;        ///< packets split
  TimePoint expires_at;          ///< when grabbing ends
  bool ready = false;            ///< every chunk is stored: grabbable until expiry or close
  bool closed = false;           ///< closed (by `close` or `close_expired`)
  std::int64_t packets_left = 0; ///< packets not grabbed (after a close: those it returned)
  std::int64_t amount_left = 0;  ///< their sum, minor units (after a close: the leftover)
  std::int64_t grabs = 0;        ///< users who won a packet
  std::int64_t losing_users = 0; ///< users whose grabs won nothing (sold_out) so far
  /// Where it stands as of the `now` given to `status`.
  PacketState state = PacketState::creating;
};

/// The outcome of `RedPacketPool::requeue_payout`.
struct RequeueResult {
  /// What the requeue did.
  enum class Status {
    /// the dead-lettered task is back in its queue, due then, its attempts reset (by this call,
    /// or before when `replayed`)
    requeued,
    /// no dead-lettered task of that packet and user, nor a requeued one still to pay
    /// (unknown, paid, or never dead): nothing changed
    not_dead,
  };
  Status status = Status::not_dead; ///< see `Status`
  /// True when an earlier call requeued it (e.g. this call, whose reply was lost) and it is
  /// queued or in flight since, neither paid nor dead: `status` is requeued, nothing changed
  /// now.
  bool replayed = false;
};

/// Red packets in Redis. Thread-safe; share one instance.
class RedPacketPool {
public:
  /// Most amounts stored by one command of `create`: bounds each command's time.
  static constexpr std::size_t chunk_amounts = 10'000;
  /// Packet ids `close_expired` reads from a partition's index per command: bounds the
  /// memory and time of one read, not how many packets a call closes.
  static constexpr std::size_t close_page = 1'000;
  /// Longest nickname or avatar URL of `UserDisplay`, in bytes.
  static constexpr std::size_t max_display_bytes = 256;

  /// Sends nothing. Throws `Error` (invalid_argument) for a bad prefix, partitions outside
  /// 1..1024, max_payout_attempts below 1, a retention or visibility_timeout that is not
  /// positive, or a negative payout_backoff.
  RedPacketPool(Redis redis, RedPacketOptions options = {});

  /// Stores the packet `packet_id` holding `amounts` (from `split`), in chunks of at most
  /// `chunk_amounts` amounts, one command each; the packet is grabbable only once the last
  /// chunk is stored (before that, grab and close throw not_found "not completely created").
  /// Idempotent by id and content: the content (amounts in order and `options`) is identified by
  /// a 64-bit digest computed here and stored with the packet. The same id with the same content
  /// is success (`replayed`); a retry of a create that was cut off (a lost reply, a timeout)
  /// stores the chunks still missing, never one twice (each chunk is pushed with its index in
  /// one script). Throws invalid_argument for a bad id, no amounts, more than
  /// `max_red_packet_amounts` or an amount < 1, and precision_overflow for a sum past 2^53 - 1
  /// (all before sending); invalid_argument (Outcome::failed, nothing written) for a new packet
  /// whose `expires_at` is not after now (the client's clock, in ms);
  /// conflict if the id exists with other content (nothing is changed then); not_found if the
  /// packet's keys expired while it was being created. A create retried after `expires_at`
  /// (its reply was lost) is still `replayed`, and stores the chunks a cut-off create left out,
  /// so that `close` returns the whole leftover. (Once the packet's keys are gone, `retention`
  /// after its expiry, such a retry is refused like a new packet: do not take that refusal
  /// for "never created" if the first attempt may be older than the retention.)
  CreateResult create(const std::string& packet_id, const std::vector<std::int64_t>& amounts,
                      const PacketOptions& options = {});

  /// Grabs for `user_id` in one script: a user who won gets the first amount again
  /// (granted with `replayed`, always, whatever the attempt cap); an expired or closed packet is
  /// refused without counting; a user who reached the attempt cap without winning is refused;
  /// otherwise a packet is popped, the draw recorded and its payout queued, or, if none is
  /// left, one attempt is counted (sold_out). Retrying after a lost reply gives `granted`
  /// with `replayed` and the amount granted. `display` is kept with the draw and the payout task.
  /// Throws not_found for an unknown or not completely created packet, invalid_argument for a bad
  /// user id or display field (before sending).
  GrabResult grab(const std::string& packet_id, const std::string& user_id,
                  TimePoint now = Clock::now());
  /// The same, with the grabber's `display` (validated before sending).
  GrabResult grab(const std::string& packet_id, const std::string& user_id,
                  const UserDisplay& display, TimePoint now = Clock::now());

  /// Many grabs pipelined, one result each, in order: the GrabResult, or the Error of that
  /// grab alone (e.g. not_found). A bad id, user id or display field throws for the whole
  /// batch before anything is sent; a connection failure throws for the whole batch (see
  /// `Redis::eval_pipeline`), and the same batch may be sent again (a repeat is `granted` with
  /// `replayed`).
  std::vector<BatchResult<GrabResult>> grab_many(const std::string& packet_id,
                                                 const std::vector<std::string>& user_ids,
                                                 TimePoint now = Clock::now());
  /// The same, with each grabber's display data.
  std::vector<BatchResult<GrabResult>> grab_many(const std::string& packet_id,
                                                 const std::vector<GrabRequest>& requests,
                                                 TimePoint now = Clock::now());
  /// `grab_many(packet, {"user-1", "user-2"})`: picks the user-id form for a braced list.
  std::vector<BatchResult<GrabResult>> grab_many(const std::string& packet_id,
                                                 std::initializer_list<std::string> user_ids,
                                                 TimePoint now = Clock::now()) {
    return grab_many(packet_id, std::vector<std::string>(user_ids), now);
  }

  /// Ends the packet: no more grabs; the amount never grabbed is computed once and stored
  /// with the packet. A later close (a retry after a lost reply) returns the same leftover
  /// with `replayed` set and `closed_now` false. Throws not_found for an unknown or not
  /// completely created id.
  CloseResult close(const std::string& packet_id);

  /// Closes every packet of every partition that expired at or before `now` (however many:
  /// it reads each partition's expiry index in pages of `close_page` ids, one close per
  /// packet); returns the closes, one per packet. A packet whose keys are gone (it outlived
  /// its retention unclosed) is reported with `gone` set and dropped from the index; the
  /// others are still closed. A close leaves the index with its packet, so a later call does
  /// not report it again: if this call throws (a Redis failure; nothing is thrown for one
  /// gone packet), the packets it closed before are not listed by the next call, and
  /// `close(id)` of one of them replays its leftover.
  std::vector<std::pair<std::string, CloseResult>> close_expired(TimePoint now = Clock::now());

  // ---- Payout queue ----

  /// Leases up to `max` due tasks of `partition` for `visibility_timeout`. Tasks whose
  /// worker let the lease run out are first returned to the queue (as one failed attempt).
  /// Not resent after a lost reply: the tasks it leased come back when their lease runs out,
  /// each counted as one failed attempt.
  /// Throws invalid_argument for a partition not below `partitions` (nothing sent), and the
  /// `Error` of a Redis failure (see `Redis::eval`).
  std::vector<PayoutTask> take_payouts(std::uint32_t partition, std::size_t max,
                                       TimePoint now = Clock::now());
  /// The task was paid. True if it is recorded as paid under `task.lease`, by this call or
  /// by an earlier ack of the same lease (a retry after a lost reply). False if the lease is
  /// stale: it ran out and another worker took the task (that worker's ack counts), or the
  /// task was finished under another lease.
  ///
  /// ack_payout, fail_payout and release_payout are resent after a lost reply (the library's
  /// resends, and a host's retry alike, answer as the first call). Each throws
  /// invalid_argument for a `task.partition` not below `partitions` (nothing sent; its ids are
  /// not checked, so that a task queued under an older version's id rules can still be
  /// finished), and the `Error` of a Redis failure (see `Redis::eval`; Outcome::unknown when
  /// the call may have run: calling it again is safe).
  bool ack_payout(const PayoutTask& task, TimePoint now = Clock::now());
  /// The payout failed: retried after a back-off, or dead-lettered after
  /// `max_payout_attempts`. Returns true if dead-lettered. One failed attempt per lease: a
  /// retry of the same lease (after a lost reply) counts nothing more and answers alike.
  bool fail_payout(const PayoutTask& task, TimePoint now = Clock::now());
  /// Hands back a task that was leased but not tried (e.g. a worker that stops before the end
  /// of what it took): it goes back to its queue due at `now`, its attempts unchanged, so the
  /// next take leases it anew for the same attempt. True if it is released under
  /// `task.lease`, by this call or by an earlier release of the same lease (a retry after a
  /// lost reply: nothing changed now; such a retry answers false once the task was released
  /// under a later lease, paid or dead-lettered since); false if that lease ran out, or the
  /// task was paid, failed or dead-lettered under it: nothing changed. A released lease acks
  /// nothing (`ack_payout` is false) and its `fail_payout` counts nothing. A task that was
  /// tried and not paid is `fail_payout`, which counts the attempt.
  bool release_payout(const PayoutTask& task, TimePoint now = Clock::now());

  /// Host callback: pay `task` idempotently by `task.idempotency_key()`; return true if
  /// paid. Returning false or throwing counts as a failed attempt.
  using PayoutFunction = std::function<bool(const PayoutTask&)>;
  /// Takes, pays and acknowledges up to `max` due tasks of every partition, one partition
  /// after the other; returns how many were paid. A `pay` that returns false or throws is a
  /// failed attempt (`fail_payout`). When a take, ack or fail throws (Redis unreachable after
  /// the library's resends, a script error), that `Error` leaves the call and the partitions
  /// after it wait for the next call. The tasks of the pass not tried yet are first handed back
  /// (`release_payout`: due now, attempts unchanged). The release is best effort: if it throws
  /// too (as it will while Redis is unreachable), its error is dropped and the tasks it did not
  /// release come back when their lease (`visibility_timeout`) runs out, each counted as one
  /// failed attempt, as is the task whose ack or fail threw.
  std::size_t run_payouts(const PayoutFunction& pay, std::size_t max = 100);

  /// The dead-lettered tasks of `partition`: "<packet>:<user>:<amount>:<attempts>".
  std::vector<std::string> dead_payouts(std::uint32_t partition);

  /// Moves the dead-lettered payout of `user_id` from `packet_id` back to its queue (an
  /// operator's retry once the cause is fixed), in one script: due at `now`, attempts counted
  /// from zero again; the lease number is kept, so the next take leases it anew and a worker
  /// still holding an old lease cannot acknowledge it. The display data of a dead task is not
  /// kept, so the requeued task has none. Idempotent: a call retried with the same ids after
  /// a lost reply changes nothing and answers requeued with `replayed` while the task waits in its
  /// queue or is in flight, not_dead once it was paid; if it died again meanwhile, the call
  /// requeues it again (an operator's retry of a dead task). Throws invalid_argument for a
  /// bad id (nothing sent).
  RequeueResult requeue_payout(const std::string& packet_id, const std::string& user_id,
                               TimePoint now = Clock::now());

  /// The packet `packet_id` as it stands (reads only, one script, so the numbers are of one
  /// moment); `now` decides "expired". Empty if the packet is unknown (never created, or
  /// its keys outlived `retention`). Reading the amount left is O(packets left). Throws
  /// invalid_argument for a bad id (nothing sent).
  std::optional<PacketStatus> status(const std::string& packet_id, TimePoint now = Clock::now());

  /// The key names this pool uses.
  const RedPacketKeys& keys() const noexcept { return keys_; }

private:
  /// `create` without reporting to the observer.
  CreateResult run_create(const std::string& packet_id, const std::vector<std::int64_t>& amounts,
                          const PacketOptions& options);
  void check_partition(std::uint32_t partition) const;
  std::vector<std::string> packet_keys(const std::string& packet_id) const;
  ScriptCall grab_call(const std::string& packet_id, const GrabRequest& request,
                       TimePoint now) const;

  Redis redis_;
  RedPacketOptions options_;
  RedPacketKeys keys_;
};

} // namespace limitcounter
