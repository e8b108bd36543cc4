#include <limitcounter/server_clock.hpp>

#include <limitcounter/error.hpp>

namespace limitcounter {

ServerClock::ServerClock(Redis redis, std::chrono::milliseconds resample_every)
    : redis_(std::move(redis)), resample_every_(resample_every) {}

bool ServerClock::resample() {
  const std::lock_guard<std::mutex> lock(sampling_);
  using std::chrono::microseconds;
  try {
    const TimePoint before = Clock::now();
    const Reply reply = redis_.command({"TIME"});
    const TimePoint after = Clock::now();
    const microseconds server{reply.at(0).to_int64() * 1'000'000 + reply.at(1).to_int64()};
    const TimePoint midpoint = before + (after - before) / 2;
    offset_us_ =
        (server - std::chrono::duration_cast<microseconds>(midpoint.time_since_epoch())).count();
    next_sample_ns_ =
        (std::chrono::steady_clock::now() + resample_every_).time_since_epoch().count();
    return true;
  } catch (const Error&) {
    // Try again at the next call after a short pause, not on every call.
    next_sample_ns_ =
        (std::chrono::steady_clock::now() + std::chrono::seconds{1}).time_since_epoch().count();
    return false;
  }
}

TimePoint ServerClock::now() {
  // One sample per interval: the thread whose compare-exchange moves the due time forward
  // samples; every other thread keeps using the current offset and never waits for it.
  const std::int64_t now_ns = std::chrono::steady_clock::now().time_since_epoch().count();
  std::int64_t due = next_sample_ns_.load();
  if (now_ns >= due && next_sample_ns_.compare_exchange_strong(
                           due, now_ns + std::chrono::nanoseconds(resample_every_).count())) {
    resample();
  }
  return Clock::now() + offset();
}

} // namespace limitcounter
