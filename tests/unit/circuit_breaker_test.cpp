#include <catch2/catch.hpp>

#include "redis/circuit_breaker.hpp"

using namespace std::chrono_literals;
using limitcounter::detail::CircuitBreaker;

TEST_CASE("the breaker opens after N failures, probes once after the pause", "[breaker]") {
  CircuitBreaker breaker(3, 100ms);
  const auto t0 = CircuitBreaker::Clock::now();
  breaker.record_failure(t0);
  breaker.record_failure(t0);
  CHECK(breaker.allow(t0));
  breaker.record_success(); // a success resets the count
  breaker.record_failure(t0);
  breaker.record_failure(t0);
  CHECK_FALSE(breaker.is_open());
  breaker.record_failure(t0);
  CHECK(breaker.is_open());
  CHECK_FALSE(breaker.allow(t0 + 50ms));
  CHECK(breaker.allow(t0 + 100ms));       // the probe
  CHECK_FALSE(breaker.allow(t0 + 101ms)); // only one probe at a time
  breaker.record_failure(t0 + 110ms);     // the probe failed: open for another pause
  CHECK_FALSE(breaker.allow(t0 + 150ms));
  CHECK(breaker.allow(t0 + 210ms));
  breaker.record_success(); // the probe succeeded: closed
  CHECK_FALSE(breaker.is_open());
  CHECK(breaker.allow(t0 + 211ms));
  CHECK(breaker.allow(t0 + 211ms));
}

TEST_CASE("a breaker with threshold 0 never opens", "[breaker]") {
  CircuitBreaker breaker(0, 100ms);
  for (int i = 0; i < 100; ++i) {
    breaker.record_failure();
  }
  CHECK(breaker.allow());
  CHECK_FALSE(breaker.is_open());
}

using limitcounter::detail::BreakerTrail;

TEST_CASE("each node's breaker learns once per call how its node did, and only its node",
          "[breaker]") {
  CircuitBreaker stalled(2, 100ms);
  CircuitBreaker healthy(2, 100ms);
  const auto t0 = CircuitBreaker::Clock::now();
  for (int call = 0; call < 2; ++call) {
    BreakerTrail trail;
    REQUIRE(trail.enter(stalled, t0));
    trail.failed(stalled);
    REQUIRE(trail.enter(stalled, t0)); // a retry within the call: counted once
    trail.failed(stalled);
    REQUIRE(trail.enter(healthy, t0));
    trail.answered(healthy);
    CHECK_FALSE(stalled.is_open()); // learnt when the call ends
  }
  CHECK(stalled.is_open()); // two calls failed on it, not four failures in one call
  CHECK_FALSE(healthy.is_open());

  BreakerTrail trail;
  CHECK_FALSE(trail.enter(stalled, t0 + 50ms)); // only the calls that need it fail fast
  CHECK(trail.enter(healthy, t0 + 50ms));
}

TEST_CASE("a node that failed then answered in one call is reported as answered", "[breaker]") {
  CircuitBreaker breaker(1, 100ms);
  {
    BreakerTrail trail;
    REQUIRE(trail.enter(breaker));
    trail.failed(breaker);   // refused the connection
    trail.answered(breaker); // answered after the slot map was read again
  }
  CHECK_FALSE(breaker.is_open());
}

TEST_CASE("the probe is the call let through; a probe that never reached its node frees the "
          "next one",
          "[breaker]") {
  CircuitBreaker breaker(1, 100ms);
  const auto t0 = CircuitBreaker::Clock::now();
  breaker.record_failure(t0);
  REQUIRE(breaker.is_open());
  {
    BreakerTrail probe;
    REQUIRE(probe.enter(breaker, t0 + 100ms));
    CHECK(probe.enter(breaker, t0 + 101ms)); // the probe may retry its own node
    BreakerTrail other;
    CHECK_FALSE(other.enter(breaker, t0 + 101ms)); // one probe at a time
    // the probe ends without an answer nor a failure of the node (e.g. another node's
    // breaker was open): nothing learnt, the breaker stays open
  }
  CHECK(breaker.is_open());
  BreakerTrail next;
  CHECK(next.enter(breaker, t0 + 102ms)); // the next caller probes
  next.failed(breaker);
  next.settle(t0 + 110ms);
  CHECK(breaker.is_open());
  CHECK_FALSE(next.enter(breaker, t0 + 150ms)); // open for another pause
}
