#pragma once
// A bounded pool of connections to one Redis node, and that node's circuit breaker.
// Connections are made lazily; a broken one is freed, never returned.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "redis/circuit_breaker.hpp"
#include "redis/connection.hpp"
#include "redis/tls_transport.hpp"

namespace limitcounter::detail {

class ConnectionPool {
public:
  /// Throws Error(invalid_argument) for TLS options that cannot be used (see TlsContext): the
  /// TLS files are read here, once for the node's connections.
  ConnectionPool(RedisOptions options, std::string host, int port)
      : options_(std::move(options)), host_(std::move(host)), port_(port),
        tls_(make_tls_context(options_)),
        breaker_(options_.breaker_failures, options_.breaker_pause) {}

  /// A connection on loan; it goes back to the pool when the lease ends, unless broken.
  class Lease {
  public:
    Lease(ConnectionPool* pool, std::unique_ptr<Connection> connection)
        : pool_(pool), connection_(std::move(connection)) {}
    Lease(Lease&&) noexcept = default;
    Lease& operator=(Lease&&) noexcept = delete;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() {
      if (connection_) {
        pool_->give_back(std::move(connection_));
      }
    }
    Connection& operator*() const noexcept { return *connection_; }
    Connection* operator->() const noexcept { return connection_.get(); }

  private:
    ConnectionPool* pool_;
    std::unique_ptr<Connection> connection_;
  };

  /// A usable connection: an idle one that is still open, else a new one if the pool has
  /// room, else one handed over within `pool_wait_timeout`. Callers that wait are served in
  /// the order they came (a connection coming back goes to the longest waiter, and a caller
  /// that arrives while others wait queues behind them), so a busy pool's tail latency is the
  /// queue's length, not luck. Throws Error(pool_exhausted | connect_failed, Outcome::not_sent).
  Lease acquire();
  /// Callers waiting for a connection now (for tests and metrics).
  std::size_t waiting();

  const std::string& host() const noexcept { return host_; }
  int port() const noexcept { return port_; }
  /// "host:port", or the socket path, for messages.
  std::string peer() const;
  /// The breaker of this node: a stalled node fails fast without failing the calls that
  /// only need the other nodes.
  CircuitBreaker& breaker() noexcept { return breaker_; }

  /// Sentinel: this node is no longer the master. Its idle connections are closed now, and
  /// those on loan are closed when they come back, so nothing stays open to a demoted server.
  /// The pool still serves a call that already chose it (that call meets READONLY or a
  /// failure, and moves on).
  void retire();
  /// Sentinel: this node is the master (again); connections go back to the pool as usual.
  void reinstate();

private:
  // A caller queued for a connection: give_back hands it one, or the room to open one.
  struct Waiter {
    std::condition_variable served;
    std::unique_ptr<Connection> connection;
    bool may_open = false;
  };

  void give_back(std::unique_ptr<Connection> connection);
  // A connection left the pool for good: the longest waiter may open one in its place.
  void release_slot_locked();
  // A lease on `handed` if it is still open, else on a new connection in the caller's place.
  Lease serve(std::unique_lock<std::mutex>& lock, std::unique_ptr<Connection> handed);

  RedisOptions options_;
  std::string host_;
  int port_;
  std::shared_ptr<const TlsContext> tls_; // null without TLS
  CircuitBreaker breaker_;
  std::mutex mutex_;
  std::deque<Waiter*> waiters_;                   // oldest first
  std::vector<std::unique_ptr<Connection>> idle_; // empty while anyone waits
  std::size_t open_ = 0;                          // idle + on loan
  bool retired_ = false;                          // see retire()
};

} // namespace limitcounter::detail
