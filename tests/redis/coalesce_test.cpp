// Concurrent consumes merged into batch script calls (LimitCounterOptions::consume_in_flight):
// each still decided on its own, all or nothing, exactly once per id (on a cluster too, where
// merged consumes take their begins, shares and finishes together).
#include <catch2/catch.hpp>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <limitcounter/limit_counter.hpp>

#include "support/probe.hpp"
#include "support/redis_server.hpp"
#include "support/topology.hpp"

using limitcounter::Decision;
using limitcounter::Dimension;
using limitcounter::Error;
using limitcounter::LimitCounter;
using limitcounter::LimitCounterOptions;
using limitcounter::Period;
using limitcounter::Redis;
using limitcounter::Rule;
using limitcounter::RuleSet;
using limitcounter::Transaction;
using limitcounter::Usage;
using limitcounter::testing::command_calls;
using limitcounter::testing::script_calls;

TEST_CASE("16 threads consuming through one place in flight: merged script calls, one first "
          "decision per id, the cap never passed",
          "[redis][coalesce][threads]") {
  Redis redis(limitcounter::testing::test_options());
  LimitCounterOptions options;
  options.key_prefix = limitcounter::testing::unique_prefix() + "merge:";
  options.consume_in_flight = 1;
  LimitCounter limits(redis, limitcounter::Calendar("Asia/Shanghai"), options);
  // 8 merchants, each at most 30 transactions a day; 40 distinct ids are tried on each.
  limits.set_rules(RuleSet().add(Rule("m-day").where("merchant").per(Period::day).max_count(30)));

  constexpr int threads = 16;
  constexpr int per_thread = 40;
  // Thread t and thread t ^ 1 send the same ids: each id is sent twice, concurrently.
  std::vector<std::vector<Decision>> decided(threads);
  std::atomic<int> errors{0};
  const long long before = script_calls(redis);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        const int pair = t / 2;
        const Transaction tx{"mg-" + std::to_string(pair) + "-" + std::to_string(i),
                             {{"merchant", "m" + std::to_string((pair + i) % 8)}},
                             5};
        try {
          decided[t].push_back(limits.consume(tx));
        } catch (const Error&) {
          ++errors;
        }
      }
    });
  }
  for (auto& worker : workers) {
    worker.join();
  }
  const long long calls_run = script_calls(redis) - before;
  REQUIRE(errors == 0);

  int firsts = 0;
  int allowed_firsts = 0;
  for (int t = 0; t < threads; t += 2) {
    for (int i = 0; i < per_thread; ++i) {
      const Decision& a = decided[t][i];
      const Decision& b = decided[t + 1][i];
      INFO("pair " << t / 2 << " transaction " << i);
      CHECK(a.replayed != b.replayed); // exactly one of the two is the first
      CHECK(a.verdict == b.verdict);   // and the replay answers what the first decided
      firsts += (a.replayed ? 0 : 1) + (b.replayed ? 0 : 1);
      allowed_firsts += (!a.replayed && a.allowed()) + (!b.replayed && b.allowed());
    }
  }
  CHECK(firsts == threads / 2 * per_thread);
  // Every merchant's counter is what its allowed first decisions took, at most its cap.
  std::int64_t counted = 0;
  for (int m = 0; m < 8; ++m) {
    const Usage used = limits.usage("merchant", Dimension{"m" + std::to_string(m)}, Period::day);
    CHECK(used.count == 30);
    CHECK(used.amount == used.count * 5);
    counted += used.count;
  }
  CHECK(counted == allowed_firsts);
  CHECK(allowed_firsts == 8 * 30); // 40 distinct ids tried on each of 8 merchants: all full
  // Merged: the server ran fewer script calls than there were consumes. (On a cluster the
  // replays of the second caller of an id take fewer calls than a decision: there, merging is
  // shown with distinct ids in tests/cluster/transaction_home_test.cpp.)
  if (!limitcounter::testing::on_cluster()) {
    INFO(calls_run << " script calls for " << threads * per_thread << " consumes");
    CHECK(calls_run < threads * per_thread);
  }
}
