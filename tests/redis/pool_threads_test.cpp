// 64 host threads sharing one Redis at the default pool settings (issue 14, deliverable 5).
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include <limitcounter/limit_counter.hpp>

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
