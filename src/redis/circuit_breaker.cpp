#include "redis/circuit_breaker.hpp"

namespace limitcounter::detail {

bool CircuitBreaker::allow(Clock::time_point now) {
  if (threshold_ <= 0) {
    return true;
  }
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!open_) {
    return true;
  }
  if (probing_ || now < reopen_at_) {
    return false;
  }
  probing_ = true;
  return true;
}

void CircuitBreaker::record_success() {
  if (threshold_ <= 0) {
    return;
  }
  const std::lock_guard<std::mutex> lock(mutex_);
  consecutive_failures_ = 0;
  open_ = false;
  probing_ = false;
}

void CircuitBreaker::record_failure(Clock::time_point now) {
  if (threshold_ <= 0) {
    return;
  }
  const std::lock_guard<std::mutex> lock(mutex_);
  ++consecutive_failures_;
  if (probing_ || consecutive_failures_ >= threshold_) {
    open_ = true;
    probing_ = false;
    reopen_at_ = now + pause_;
  }
}

bool CircuitBreaker::is_open() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return open_;
}

} // namespace limitcounter::detail
