#pragma once
// A clock aligned to the Redis server's TIME, so that nodes with skewed clocks still
// agree on which window (which day, which minute) a transaction falls in.

#include <atomic>
#include <chrono>
#include <mutex>

#include <limitcounter/calendar.hpp>
#include <limitcounter/redis.hpp>

namespace limitcounter {

/// Host time corrected by the offset to the Redis server's clock. The offset is sampled
/// with one `TIME` command (the midpoint of its round trip) when first needed and then
/// every `resample_every`; `now()` itself costs no round trip. When a sample falls due,
/// exactly one calling thread sends `TIME`; threads calling meanwhile use the previous offset
/// without waiting for it. If a resample fails, the
/// last offset stays in use (and 0 before the first success): a sick Redis never makes
/// the clock throw. Pass `clock.now()` as a Transaction's time, or to `add`/`usage`.
///
/// Choosing it: with the host clock (the default everywhere), a node whose clock runs
/// ahead counts into tomorrow's window a little early at midnight. With a ServerClock
/// every node uses Redis's notion of time, which is one clock for all.
class ServerClock {
public:
  /// Sends nothing: the first `now()` takes the first sample. `resample_every` is how long
  /// an offset is used before the next `TIME`.
  explicit ServerClock(Redis redis,
                       std::chrono::milliseconds resample_every = std::chrono::seconds{60});

  /// The server-aligned now.
  TimePoint now();
  /// Server time minus host time at the last sample.
  std::chrono::microseconds offset() const noexcept {
    return std::chrono::microseconds{offset_us_.load()};
  }
  /// Samples the offset now; returns false (keeping the old offset) if Redis did not answer.
  bool resample();

private:
  Redis redis_;
  std::chrono::milliseconds resample_every_;
  std::atomic<std::int64_t> offset_us_{0};
  std::atomic<std::int64_t> next_sample_ns_{0}; // steady clock
  std::mutex sampling_;
};

} // namespace limitcounter
