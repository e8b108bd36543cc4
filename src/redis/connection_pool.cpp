#include "redis/connection_pool.hpp"

#include <algorithm>

#include <limitcounter/error.hpp>

namespace limitcounter::detail {

ConnectionPool::Lease ConnectionPool::acquire() {
  const auto deadline = std::chrono::steady_clock::now() + options_.pool_wait_timeout;
  std::unique_lock<std::mutex> lock(mutex_);
  if (waiters_.empty()) {
    while (!idle_.empty()) {
      std::unique_ptr<Connection> connection = std::move(idle_.back());
      idle_.pop_back();
      if (connection->usable()) {
        return Lease(this, std::move(connection));
      }
      --open_; // closed by the server while idle: drop it and look again
    }
    if (open_ < options_.pool_size) {
      ++open_;
      return serve(lock, nullptr);
    }
  }
  Waiter waiter;
  waiters_.push_back(&waiter);
  while (!waiter.connection && !waiter.may_open) {
    if (waiter.served.wait_until(lock, deadline) == std::cv_status::timeout && !waiter.connection &&
        !waiter.may_open) {
      waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &waiter));
      throw Error(errc::pool_exhausted, "all " + std::to_string(options_.pool_size) +
                                            " connections to " + peer() + " stayed busy for " +
                                            std::to_string(options_.pool_wait_timeout.count()) +
                                            " ms; nothing was sent");
    }
  }
  // Whoever served the waiter took it off the queue.
  return serve(lock, std::move(waiter.connection));
}

ConnectionPool::Lease ConnectionPool::serve(std::unique_lock<std::mutex>& lock,
                                            std::unique_ptr<Connection> handed) {
  if (handed && handed->usable()) {
    return Lease(this, std::move(handed));
  }
  // The caller holds a place in the pool: a new connection takes it when none was handed
  // over, or when the one handed over was closed by the server while it came back.
  lock.unlock();
  handed.reset();
  try {
    return Lease(this, Connection::open(options_, host_, port_, true, tls_));
  } catch (...) {
    lock.lock();
    release_slot_locked();
    throw;
  }
}

std::size_t ConnectionPool::waiting() {
  const std::lock_guard<std::mutex> lock(mutex_);
  return waiters_.size();
}

void ConnectionPool::release_slot_locked() {
  if (waiters_.empty()) {
    --open_;
    return;
  }
  Waiter* next = waiters_.front();
  waiters_.pop_front();
  next->may_open = true;
  next->served.notify_one();
}

std::string ConnectionPool::peer() const {
  return options_.unix_socket.empty() || !host_.empty() ? host_ + ":" + std::to_string(port_)
                                                        : options_.unix_socket;
}

void ConnectionPool::retire() {
  std::vector<std::unique_ptr<Connection>> closing;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    retired_ = true;
    open_ -= idle_.size();
    closing.swap(idle_);
  }
  // The idle connections are closed here, outside the lock. (No caller waits while any is
  // idle: a connection coming back goes to a waiter first.)
}

void ConnectionPool::reinstate() {
  const std::lock_guard<std::mutex> lock(mutex_);
  retired_ = false;
}

void ConnectionPool::give_back(std::unique_ptr<Connection> connection) {
  std::unique_ptr<Connection> closing; // freed after the lock is released
  const std::lock_guard<std::mutex> lock(mutex_);
  if (connection->broken() || retired_) {
    closing = std::move(connection);
    release_slot_locked();
  } else if (!waiters_.empty()) {
    Waiter* next = waiters_.front();
    waiters_.pop_front();
    next->connection = std::move(connection);
    next->served.notify_one();
  } else {
    idle_.push_back(std::move(connection));
  }
}

} // namespace limitcounter::detail
