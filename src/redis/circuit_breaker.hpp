#pragma once
// A circuit breaker per Redis node: after N consecutive infrastructure failures of that
// node, calls that need it fail fast for a pause, then one probe is let through. A dead
// node then costs microseconds per call, not a timeout per call, and the other nodes of a
// cluster are not affected. BreakerTrail is the breakers' side of one call.

#include <array>
#include <chrono>
#include <mutex>
#include <vector>

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
  /// The call that `allow` let through never reached the node (it ended before, e.g. on
  /// another node's open breaker or a full pool): nothing is learnt, and if it was the probe
  /// the next caller may probe.
  void release();
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

/// The nodes one call went to, and how each did in it, so that every node's breaker learns
/// once per call whatever the call's hops, redirections and retries: a breaker is asked
/// (`allow`) the first time the call needs its node, and told how the node did when the
/// trail ends. Not thread-safe: one trail per call.
class BreakerTrail {
public:
  using Clock = CircuitBreaker::Clock;

  BreakerTrail() = default;
  BreakerTrail(const BreakerTrail&) = delete;
  BreakerTrail& operator=(const BreakerTrail&) = delete;
  /// Reports to every breaker entered (see `settle`).
  ~BreakerTrail() { settle(); }

  /// Whether the call may use the node of `breaker`: true if it entered it before, else
  /// `breaker.allow()` (when true, the node is entered).
  bool enter(CircuitBreaker& breaker, Clock::time_point now = Clock::now());
  /// The node answered (a reply, even an error reply): it is alive. The last word on a node
  /// in a call is the one reported.
  void answered(CircuitBreaker& breaker) { mark(breaker, State::answered); }
  /// The node failed for an infrastructure reason (no connection, timeout, broken connection,
  /// still refusing when the budget ran out).
  void failed(CircuitBreaker& breaker) { mark(breaker, State::failed); }
  /// Tells each entered breaker how its node did: record_failure, record_success, or
  /// release when the call never got an answer nor a failure from it. Then forgets them.
  void settle(Clock::time_point now = Clock::now());

private:
  enum class State { entered, answered, failed };
  struct Entry {
    CircuitBreaker* breaker;
    State state;
  };
  void mark(CircuitBreaker& breaker, State state);
  Entry* find(const CircuitBreaker& breaker);
  void add(Entry entry);

  // A call touches few nodes: they stay inline (no allocation on the hot path) and a linear
  // search is the fastest; a pipeline over more nodes spills into `more_`.
  std::array<Entry, 4> inline_{};
  std::size_t inline_size_ = 0;
  std::vector<Entry> more_;
};

} // namespace limitcounter::detail
