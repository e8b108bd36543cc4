// Many threads consuming through few places in flight, ids shared between threads
// (some with another amount: a conflict), a window cap and a per-transaction cap, the
// exhausted cache on and off. Checked against the server: one first decision per id, what
// Redis recorded is what the first caller was told, counters = the allowed first decisions.
#include <catch2/catch.hpp>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <limitcounter/limit_counter.hpp>

#include "support/probe.hpp"
#include "support/redis_server.hpp"
#include "support/topology.hpp"

using limitcounter::Decision;
using limitcounter::Dimension;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::LimitCounter;
using limitcounter::LimitCounterOptions;
using limitcounter::Period;
using limitcounter::Redis;
using limitcounter::RedisOptions;
using limitcounter::Rule;
using limitcounter::RuleSet;
using limitcounter::Transaction;
using limitcounter::TransactionState;
using limitcounter::Usage;

namespace {

struct Outcome {
  int thread = 0;
  std::int64_t amount = 0;
  bool error = false;
  bool conflict = false;
  bool replayed = false;
  bool cached = false;
  bool allowed = false;
};

} // namespace

TEST_CASE("many threads, shared ids, conflicts, caps: every decision as Redis "
          "recorded it",
          "[redis][coalesce][threads][standalone]") {
  const std::size_t in_flight = GENERATE(1, 2);
  const bool cache = GENERATE(false, true);
  const int threads = GENERATE(16, 32);
  INFO("consume_in_flight " << in_flight << " cache " << cache << " threads " << threads);
  RedisOptions redis_options = limitcounter::testing::test_options();
  redis_options.pool_size = 4;
  Redis redis(redis_options);
  LimitCounterOptions options;
  options.key_prefix = limitcounter::testing::unique_prefix() + "rv22:";
  options.consume_in_flight = in_flight;
  options.exhausted_cache.enabled = cache;
  options.exhausted_cache.max_staleness = std::chrono::milliseconds{50};
  LimitCounter limits(redis, limitcounter::Calendar("UTC"), options);
  limits.set_rules(
      RuleSet()
          .add(Rule("single").where("merchant").per_transaction().max_amount(45))
          .add(Rule("m-day").where("merchant").per(Period::day).max_count(25).max_amount(600)));

  constexpr int per_thread = 60;
  constexpr int merchants = 4;
  std::vector<std::vector<std::pair<std::string, Outcome>>> seen(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        // Threads t and t ^ 1 and t ^ 2 share ids; thread t ^ 2 uses another amount on every
        // third id (a conflict); amounts 10..50 (above 45: a single_amount denial).
        const int group = t / 4;
        const std::string id = "g" + std::to_string(group) + "-" + std::to_string(i);
        std::int64_t amount = 10 + 10 * ((group + i) % 5);
        if ((t & 2) && i % 3 == 0) {
          amount += 1;
        }
        const std::string merchant = "m" + std::to_string((group + i) % merchants);
        Outcome outcome;
        outcome.thread = t;
        outcome.amount = amount;
        try {
          const Decision d = limits.consume(Transaction{id, {{"merchant", merchant}}, amount});
          outcome.replayed = d.replayed;
          outcome.cached = d.cached;
          outcome.allowed = d.allowed();
        } catch (const Error& e) {
          outcome.error = true;
          outcome.conflict = e.code() == errc::conflict;
        }
        seen[t].emplace_back(id, outcome);
      }
    });
  }
  for (auto& worker : workers) {
    worker.join();
  }

  std::map<std::string, std::vector<Outcome>> by_id;
  int errors = 0;
  for (const auto& list : seen) {
    for (const auto& [id, outcome] : list) {
      by_id[id].push_back(outcome);
      errors += outcome.error && !outcome.conflict;
    }
  }
  CHECK(errors == 0);
  int two_firsts = 0;
  int wrong = 0;
  int missing = 0;
  std::int64_t allowed_count = 0;
  std::int64_t allowed_amount = 0;
  LimitCounterOptions plain;
  plain.key_prefix = options.key_prefix;
  LimitCounter reader(redis, limitcounter::Calendar("UTC"), plain);
  for (const auto& [id, outcomes] : by_id) {
    const auto record = reader.transaction_record(id);
    int firsts = 0;
    for (const auto& o : outcomes) {
      if (o.error || o.cached) {
        continue;
      }
      if (!record) {
        ++missing;
        continue;
      }
      // Whatever a caller was told (first or replay) is what Redis recorded.
      if (o.allowed != (record->state == TransactionState::consumed)) {
        ++wrong;
      }
      if (!o.replayed) {
        ++firsts;
        if (o.allowed) {
          ++allowed_count;
          allowed_amount += o.amount;
        }
      }
    }
    two_firsts += firsts > 1;
  }
  CHECK(two_firsts == 0);
  CHECK(wrong == 0);
  CHECK(missing == 0);
  std::int64_t counted = 0;
  std::int64_t counted_amount = 0;
  for (int m = 0; m < merchants; ++m) {
    const Usage used = reader.usage("merchant", Dimension{"m" + std::to_string(m)}, Period::day);
    CHECK(used.count <= 25);
    CHECK(used.amount <= 600);
    counted += used.count;
    counted_amount += used.amount;
  }
  CHECK(counted == allowed_count);
  CHECK(counted_amount == allowed_amount);
}
