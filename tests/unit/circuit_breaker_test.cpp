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
