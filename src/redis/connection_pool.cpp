#include "redis/connection_pool.hpp"

#include <limitcounter/error.hpp>

namespace limitcounter::detail {

ConnectionPool::Lease ConnectionPool::acquire() {
  const auto deadline = std::chrono::steady_clock::now() + options_.pool_wait_timeout;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
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
      lock.unlock();
      try {
        return Lease(this, Connection::open(options_, host_, port_));
      } catch (...) {
        lock.lock();
        --open_;
        returned_.notify_one();
        throw;
      }
    }
    if (returned_.wait_until(lock, deadline) == std::cv_status::timeout && idle_.empty() &&
        open_ >= options_.pool_size) {
      throw Error(errc::pool_exhausted, "all " + std::to_string(options_.pool_size) +
                                            " connections to " + peer() + " stayed busy for " +
                                            std::to_string(options_.pool_wait_timeout.count()) +
                                            " ms; nothing was sent");
    }
  }
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
  returned_.notify_all();
  // The idle connections are closed here, outside the lock.
}

void ConnectionPool::reinstate() {
  const std::lock_guard<std::mutex> lock(mutex_);
  retired_ = false;
}

void ConnectionPool::give_back(std::unique_ptr<Connection> connection) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (connection->broken() || retired_) {
      --open_;
    } else {
      idle_.push_back(std::move(connection));
    }
  }
  returned_.notify_one();
  // A broken connection is freed here, outside the lock.
}

} // namespace limitcounter::detail
