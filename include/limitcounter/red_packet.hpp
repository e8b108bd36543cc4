#pragma once
// RedPacketPool: red packets split in advance, grabbed atomically, paid out through a
// reliable queue (job 5 of DESIGN).

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <limitcounter/calendar.hpp>
#include <limitcounter/red_packet_keys.hpp>
#include <limitcounter/red_packet_split.hpp>
#include <limitcounter/redis.hpp>

namespace limitcounter {

/// Settings of a RedPacketPool.
struct RedPacketOptions {
  std::string key_prefix = std::string(RedPacketKeys::default_prefix);
  /// Payout-queue partitions; a packet's keys live with its partition (one cluster slot).
  /// Every process of the host must use the same number.
  std::uint32_t partitions = 16;
  /// How long a packet's keys (and its draws) are kept after it expires.
  std::chrono::milliseconds retention{std::chrono::hours{24 * 7}};
  /// How long a worker may hold a payout task before it is handed to another worker.
  std::chrono::milliseconds visibility_timeout{std::chrono::seconds{30}};
  /// Payout attempts before a task goes to the dead-letter list.
  int max_payout_attempts = 5;
  /// Back-off after the first failed payout; doubles with every further failure.
  std::chrono::milliseconds payout_backoff{std::chrono::seconds{1}};
};

/// The rules of one packet at creation.
struct PacketOptions {
  /// When grabbing ends; after it, `close` returns what is left.
  TimePoint expires_at = Clock::now() + std::chrono::hours{24};
  /// Calls per user that get an amount (granted or already) before the user is refused.
  int max_attempts_per_user = 10;
};

/// The answer to a grab.
struct GrabResult {
  enum class Status {
    granted,           ///< a packet was popped for this user; its payout is queued
    already,           ///< the user had grabbed before: the same amount again, nothing moved
    sold_out,          ///< no packet left (not counted as an attempt)
    expired,           ///< past the expiry or closed (not counted as an attempt)
    too_many_attempts, ///< the user reached the attempt cap
  };
  Status status = Status::sold_out;
  std::int64_t amount = 0; ///< for granted and already, minor units
};

/// The answer to `close`.
struct CloseResult {
  bool closed_now = false;   ///< false if it had been closed before (nothing returned now)
  std::int64_t leftover = 0; ///< the amount never grabbed, returned by this call only
  std::int64_t packets_left = 0;
};

/// One payout a worker must make.
struct PayoutTask {
  std::string packet_id;
  std::string user_id;
  std::int64_t amount = 0;
  int attempt = 1; ///< 1 for the first try
  std::uint32_t partition = 0;
  std::uint64_t lease = 0; ///< guards ack and fail: a stale lease changes nothing
  /// "<packet>:<user>": the same for every attempt, for the host's idempotent payout.
  std::string idempotency_key() const { return packet_id + ":" + user_id; }
};

/// Red packets in Redis. Thread-safe; share one instance.
class RedPacketPool {
public:
  RedPacketPool(Redis redis, RedPacketOptions options = {});

  /// Stores the packet `packet_id` holding `amounts` (from `split`). Throws invalid_argument
  /// for a bad id, no amounts, an amount < 1, a sum >= 2^53 or an expiry in the past;
  /// conflict if the id exists (nothing is changed then).
  void create(const std::string& packet_id, const std::vector<std::int64_t>& amounts,
              const PacketOptions& options = {});

  /// Grabs for `user_id` in one script: a repeat gives the first amount (already); an
  /// expired or empty packet is refused without counting; otherwise a packet is popped,
  /// the draw recorded and its payout queued. Throws not_found for an unknown packet.
  GrabResult grab(const std::string& packet_id, const std::string& user_id,
                  TimePoint now = Clock::now());

  /// Many grabs pipelined on one connection, one result each, in order.
  std::vector<GrabResult> grab_many(const std::string& packet_id,
                                    const std::vector<std::string>& user_ids,
                                    TimePoint now = Clock::now());

  /// Ends the packet: no more grabs, and the amount never grabbed is returned exactly once
  /// (a second close returns closed_now = false and 0). Throws not_found for an unknown id.
  CloseResult close(const std::string& packet_id);

  /// Closes every packet of every partition that expired before `now`; returns the closes.
  std::vector<std::pair<std::string, CloseResult>> close_expired(TimePoint now = Clock::now());

  // ---- Payout queue ----

  /// Leases up to `max` due tasks of `partition` for `visibility_timeout`. Tasks whose
  /// worker let the lease run out are first returned to the queue (as one failed attempt).
  std::vector<PayoutTask> take_payouts(std::uint32_t partition, std::size_t max,
                                       TimePoint now = Clock::now());
  /// The task was paid. False if the lease had run out (another worker may hold it).
  bool ack_payout(const PayoutTask& task, TimePoint now = Clock::now());
  /// The payout failed: retried after a back-off, or dead-lettered after
  /// `max_payout_attempts`. Returns true if dead-lettered.
  bool fail_payout(const PayoutTask& task, TimePoint now = Clock::now());

  /// Host callback: pay `task` idempotently by `task.idempotency_key()`; return true if
  /// paid. Returning false or throwing counts as a failed attempt.
  using PayoutFunction = std::function<bool(const PayoutTask&)>;
  /// Takes, pays and acknowledges up to `max` due tasks of every partition; returns how
  /// many were paid.
  std::size_t run_payouts(const PayoutFunction& pay, std::size_t max = 100);

  /// The dead-lettered tasks of `partition`: "<packet>:<user>:<amount>:<attempts>".
  std::vector<std::string> dead_payouts(std::uint32_t partition);

  const RedPacketKeys& keys() const noexcept { return keys_; }

private:
  void check_partition(std::uint32_t partition) const;
  ScriptCall grab_call(const std::string& packet_id, const std::string& user_id,
                       TimePoint now) const;

  Redis redis_;
  RedPacketOptions options_;
  RedPacketKeys keys_;
};

} // namespace limitcounter
