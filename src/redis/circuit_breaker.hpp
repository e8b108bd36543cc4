#pragma once
// A circuit breaker: after N consecutive infrastructure failures, calls fail fast for a
// pause, then one probe is let through. A dead Redis then costs microseconds per call,
// not a timeout per call.

#include <atomic>
#include <chrono>
#include <mutex>

namespace limitcounter::detail {

class CircuitBreaker {
public:
  using Clock = std::chrono::steady_clock;

  CircuitBreaker(int threshold, std::chrono::milliseconds pause)
      : threshold_(threshold), pause_(pause) {}

  /// Whether a call may go ahead now. While open, false until the pause has passed; then
  /// true for exactly one caller (the probe) until it reports back.
  bool allow(Clock::time_point now = Clock::now());
  /// The call reached Redis and got an answer (an error reply counts as an answer).
  void record_success();
  /// The call failed for an infrastructure reason.
  void record_failure(Clock::time_point now = Clock::now());
  bool is_open() const;

private:
  const int threshold_;
  const std::chrono::milliseconds pause_;
  mutable std::mutex mutex_;
  int consecutive_failures_ = 0;
  bool open_ = false;
  bool probing_ = false;
  Clock::time_point reopen_at_{};
};

} // namespace limitcounter::detail
