// 64 host threads sharing one Redis at the default pool settings (issue 14, deliverable 5), and
// the order in which a busy pool serves its waiting callers.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <limitcounter/limit_counter.hpp>

#include "redis/connection_pool.hpp"
#include "support/probe.hpp"
#include "support/redis_server.hpp"
#include "support/topology.hpp"

using limitcounter::Error;
using limitcounter::LimitCounter;
using limitcounter::LimitCounterOptions;
using limitcounter::Period;
using limitcounter::Redis;
using limitcounter::RedisOptions;
using limitcounter::Rule;
using limitcounter::RuleSet;
using limitcounter::Transaction;

TEST_CASE("64 threads x 100 consumes on one Redis with the default pool all succeed",
          "[pool][redis][threads]") {
  RedisOptions options = limitcounter::testing::test_options();
  // The defaults under test: 8 connections, a caller waits up to 1 s for one.
  options.pool_size = RedisOptions{}.pool_size;
  options.pool_wait_timeout = RedisOptions{}.pool_wait_timeout;
  LimitCounterOptions counter_options;
  counter_options.key_prefix = limitcounter::testing::unique_prefix() + "pool64:";
  LimitCounter limits(Redis(options), limitcounter::Calendar("Asia/Shanghai"), counter_options);
  limits.set_rules(RuleSet().add(
      Rule("merchant-day").where("merchant").per(Period::day).max_amount(1'000'000'000)));

  constexpr int threads = 64;
  constexpr int per_thread = 100;
  std::atomic<int> allowed{0};
  std::atomic<int> failed{0};
  std::mutex first_error_mutex;
  std::string first_error;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        try {
          const Transaction tx{"p64-" + std::to_string(t) + "-" + std::to_string(i),
                               {{"merchant", "m" + std::to_string(t % 8)}},
                               1};
          allowed += limits.consume(tx).allowed() ? 1 : 0;
        } catch (const Error& e) {
          ++failed;
          const std::lock_guard<std::mutex> lock(first_error_mutex);
          if (first_error.empty()) {
            first_error = e.what();
          }
        }
      }
    });
  }
  for (auto& worker : workers) {
    worker.join();
  }
  INFO("first error: " << first_error);
  CHECK(failed == 0);
  CHECK(allowed == threads * per_thread);
}

using limitcounter::detail::ConnectionPool;

namespace {

// A pool of one connection to the shared server, whose callers wait up to `wait` for it.
ConnectionPool one_connection_pool(std::chrono::milliseconds wait) {
  const auto& server = limitcounter::testing::shared_server();
  RedisOptions options = server.options();
  options.pool_size = 1;
  options.pool_wait_timeout = wait;
  return ConnectionPool(options, "127.0.0.1", server.port());
}

} // namespace

// The pool serves waiting callers in the order they came: a connection coming back goes to the
// longest waiter, and a caller that arrives while others wait queues behind them (no barging),
// so one caller cannot be passed over again and again while the pool is busy.
TEST_CASE("a busy pool serves its waiting callers first come, first served",
          "[pool][redis][threads][standalone]") {
  ConnectionPool pool = one_connection_pool(std::chrono::seconds(30));

  constexpr int waiters = 6;
  std::mutex order_mutex;
  std::vector<int> served; // who got the connection, in order
  auto take_and_note = [&](int who) {
    auto lease = pool.acquire();
    const std::lock_guard<std::mutex> lock(order_mutex);
    served.push_back(who);
  };

  std::vector<std::thread> threads;
  {
    auto held = pool.acquire(); // the pool's one connection, busy
    for (int who = 1; who <= waiters; ++who) {
      threads.emplace_back(take_and_note, who);
      // The next caller comes only once this one waits in the queue.
      while (pool.waiting() < static_cast<std::size_t>(who)) {
        std::this_thread::yield();
      }
    }
  } // the connection comes back with six callers waiting
  // This caller arrives after them and right as the connection comes back: it is served last.
  take_and_note(0);
  for (auto& thread : threads) {
    thread.join();
  }
  CHECK(served == std::vector<int>{1, 2, 3, 4, 5, 6, 0});
  CHECK(pool.waiting() == 0);
}

TEST_CASE("a caller that waited past pool_wait_timeout is refused (not sent) and leaves the queue",
          "[pool][redis][threads][standalone]") {
  ConnectionPool pool = one_connection_pool(std::chrono::milliseconds(50));
  const int port = limitcounter::testing::shared_server().port();

  auto held = std::make_unique<ConnectionPool::Lease>(pool.acquire());
  const Error e = limitcounter::testing::error_of([&] { (void)pool.acquire(); });
  CHECK(e.code() == limitcounter::errc::pool_exhausted);
  CHECK(e.outcome() == limitcounter::Outcome::not_sent);
  CHECK_THAT(e.what(), Catch::Contains("all 1 connections to 127.0.0.1:" + std::to_string(port)) &&
                           Catch::Contains("stayed busy for 50 ms"));
  CHECK(pool.waiting() == 0);
  held.reset();
  // The connection that came back is idle again, and served at once.
  auto again = pool.acquire();
  CHECK(again->usable());
}
