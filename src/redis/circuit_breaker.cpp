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

void CircuitBreaker::release() {
  if (threshold_ <= 0) {
    return;
  }
  const std::lock_guard<std::mutex> lock(mutex_);
  probing_ = false;
}

bool CircuitBreaker::is_open() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return open_;
}

BreakerTrail::Entry* BreakerTrail::find(const CircuitBreaker& breaker) {
  for (std::size_t i = 0; i < inline_size_; ++i) {
    if (inline_[i].breaker == &breaker) {
      return &inline_[i];
    }
  }
  for (Entry& entry : more_) {
    if (entry.breaker == &breaker) {
      return &entry;
    }
  }
  return nullptr;
}

void BreakerTrail::add(Entry entry) {
  if (inline_size_ < inline_.size()) {
    inline_[inline_size_++] = entry;
  } else {
    more_.push_back(entry);
  }
}

bool BreakerTrail::enter(CircuitBreaker& breaker, Clock::time_point now) {
  if (find(breaker) != nullptr) {
    return true; // this call was let through already (perhaps as the probe)
  }
  if (!breaker.allow(now)) {
    return false;
  }
  add({&breaker, State::entered});
  return true;
}

void BreakerTrail::mark(CircuitBreaker& breaker, State state) {
  if (Entry* entry = find(breaker)) {
    entry->state = state;
    return;
  }
  // Not entered: the caller did not ask first. Count it anyway, so a failure is not lost.
  add({&breaker, state});
}

void BreakerTrail::settle(Clock::time_point now) {
  const auto report = [now](const Entry& entry) {
    switch (entry.state) {
    case State::failed: entry.breaker->record_failure(now); break;
    case State::answered: entry.breaker->record_success(); break;
    case State::entered: entry.breaker->release(); break;
    }
  };
  for (std::size_t i = 0; i < inline_size_; ++i) {
    report(inline_[i]);
  }
  for (const Entry& entry : more_) {
    report(entry);
  }
  inline_size_ = 0;
  more_.clear();
}

} // namespace limitcounter::detail
