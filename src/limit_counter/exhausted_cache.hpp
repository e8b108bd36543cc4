#pragma once
// The exhausted cache (LimitCounterOptions::exhausted_cache): window limits that Redis
// recently reported full, so that this process denies further transactions on them without
// a round trip. Pure (no Redis): unit-tested in tests/unit/exhausted_cache_test.cpp.
//
// It only ever denies, and only what Redis would deny too given the `used` it reported: a
// count limit denies every transaction, an amount limit only those whose amount does not fit
// beside that `used` (a smaller amount may still fit, so it goes to Redis). That stays true
// as long as the counter can only have grown since, so an entry ends at the first moment it
// may have shrunk or stopped applying: its staleness bound (room freed elsewhere in the
// fleet), the end of its window (by the transaction's time), `clear` (a refund, cancel or
// confirm of this process, or new rules), and an expiry of a hold this process placed on the
// same counter (see `note_hold`).

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <limitcounter/calendar.hpp>
#include <limitcounter/decision.hpp>
#include <limitcounter/limit_counter.hpp>

namespace limitcounter::detail {

/// One window rule's counter as a transaction would move it.
struct ExhaustedPlace {
  std::string rule; ///< the window rule's name
  /// The rule, window id and dimension, one per line: unique within a rule set.
  std::string key;
  TimePoint window_end; ///< the end of the window (an entry never outlives it)
};

/// The place of `rule` (a window rule whose attributes `transaction` has) for `transaction`.
ExhaustedPlace exhausted_place(const std::string& rule, std::string_view window_id,
                               std::string_view field, TimePoint window_end);

/// Thread-safe; one per LimitCounter.
class ExhaustedCache {
public:
  using SteadyTime = std::chrono::steady_clock::time_point;

  /// The cache `options` ask for: null when not enabled. Throws Error (invalid_argument)
  /// naming a max_staleness that is not positive or a max_entries of 0.
  static std::shared_ptr<ExhaustedCache> make(const ExhaustedCacheOptions& options);

  /// `max_staleness` > 0 and `max_entries` >= 1 (see `make`).
  ExhaustedCache(std::chrono::milliseconds max_staleness, std::size_t max_entries)
      : max_staleness_(max_staleness), max_entries_(max_entries) {}

  /// Taken before a decide call is sent and passed to `remember` with its denial: a denial
  /// whose call began before a `clear` is not remembered (it may predate the freed room).
  std::uint64_t generation() const;

  /// A denial of `amount` of transaction `id` that the cached entry of one of `places`
  /// implies, at transaction time `at`, wall clock `wall_now` and steady clock `now`; empty
  /// when Redis must decide (no entry, or the amount may fit, or `id` is unsettled). Entries
  /// found past their staleness bound or their window's end are dropped.
  std::optional<Denial> lookup(const std::vector<ExhaustedPlace>& places, const std::string& id,
                               std::int64_t amount, TimePoint at, TimePoint wall_now,
                               SteadyTime now);

  /// Remembers a count or amount `denial` Redis gave at `place` until `now + max_staleness`
  /// (or the window's end). Ignored when `generation` is not current, for other metrics, and
  /// when this process held a reservation on the place at `wall_now`, the time the denied
  /// call carried (by which Redis judged holds expired). The oldest entry makes room when
  /// `max_entries` are kept.
  void remember(const ExhaustedPlace& place, const Denial& denial, std::uint64_t generation,
                TimePoint wall_now, SteadyTime now);

  /// This process placed a hold on `places` that expires (in Redis, by the wall clock) at
  /// `hold_end`: its expiry frees room at a moment the cache does not track per hold, so the
  /// places' entries are dropped and none is kept for them until `hold_end`.
  void note_hold(const std::vector<ExhaustedPlace>& places, TimePoint hold_end, TimePoint wall_now);

  /// The call for `id` may have run without its reply (Outcome::unknown): its retry in this
  /// process goes to Redis, which replays what it decided, until `settled(id)`.
  void unsettled(const std::string& id);
  /// Redis decided `id`: its calls may be decided from the cache again.
  void settled(const std::string& id);

  /// Drops every entry (room may have been freed anywhere) and starts a new generation.
  void clear();

  /// Entries kept (some may be stale until looked up or evicted).
  std::size_t size() const;

private:
  struct Entry {
    Denial denial;
    TimePoint window_end;
    SteadyTime stale_at;
    std::list<std::string>::iterator order; // position in order_
  };
  bool holding(const std::string& key, TimePoint wall_now) const;
  void erase(std::unordered_map<std::string, Entry>::iterator entry);

  const std::chrono::milliseconds max_staleness_;
  const std::size_t max_entries_;
  mutable std::mutex mutex_;
  std::uint64_t generation_ = 0;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> order_; // oldest first: the next to evict
  // The latest end of a hold this process placed, per place; `holds_overflow_` stands for
  // the holds evicted to keep the map within max_entries (no entry is kept until it passes).
  std::unordered_map<std::string, TimePoint> holds_;
  TimePoint holds_overflow_{};
  std::list<std::string> unsettled_; // oldest first, bounded by max_entries
  std::unordered_map<std::string, std::list<std::string>::iterator> unsettled_at_;
};

} // namespace limitcounter::detail
