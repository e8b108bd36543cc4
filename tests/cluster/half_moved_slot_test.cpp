// Refunds, confirms and cancels of a transaction whose share slot is half moved: the slot is
// marked IMPORTING/MIGRATING and its keys are moved one MIGRATE ... KEYS batch at a time, the
// operation runs in between, then the rest moves and the slot is handed over. Three orders of
// what moves first: the share's record and counter set, its counters, one counter of two.
// Whatever the order, the operation must wait (TRYAGAIN, retried) until the keys it touches are
// on one node, and then count exactly once: nothing given back twice, nothing recorded as done
// that gave nothing back.
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <limitcounter/limitcounter.hpp>

#include "redis/key_slot.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using namespace limitcounter;
using namespace limitcounter::testing;

namespace {

enum class Order { record_first, counters_first, one_counter_first };
enum class Op { refund, confirm, cancel };

const char* name_of(Order order) {
  switch (order) {
  case Order::record_first: return "record and counter set first";
  case Order::counters_first: return "counters first";
  case Order::one_counter_first: return "the month counter first";
  }
  return "?";
}

const char* name_of(Op op) {
  switch (op) {
  case Op::refund: return "refund";
  case Op::confirm: return "confirm";
  case Op::cancel: return "cancel";
  }
  return "?";
}

// The count of one error code in a node's INFO errorstats ("errorstat_TRYAGAIN:count=3").
std::int64_t error_count(const RedisServer& node, const std::string& code) {
  RedisOptions options = node.options();
  options.pool_size = 1;
  const std::string info = Redis(options).command({"INFO", "errorstats"}).as_string();
  const std::string head = "errorstat_" + code + ":count=";
  const auto at = info.find(head);
  return at == std::string::npos ? 0 : std::stoll(info.substr(at + head.size()));
}

struct HalfMovedSlot {
  RedisCluster& cluster = shared_cluster();
  std::string prefix = unique_prefix() + "hm:";
  // The shape whose slot moves: two counters (day, month) in one share.
  const std::string moving = "halfmoved";
  Redis redis{cluster.options()};
  LimitCounter limits{redis, Calendar("UTC"), [this] {
                        LimitCounterOptions options;
                        options.key_prefix = prefix;
                        return options;
                      }()};

  HalfMovedSlot() {
    REQUIRE(detail::key_slot(moving) != detail::key_slot("merchant"));
    std::vector<std::string> attributes = RuleSet::default_attributes();
    attributes.push_back(moving);
    limits.set_rules(
        RuleSet(attributes)
            .add(Rule("moving-day").where(moving).per(Period::day).max_amount(1000))
            .add(Rule("moving-month").where(moving).per(Period::month).max_amount(1'000'000))
            .add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(1'000'000)));
  }

  Transaction tx(const std::string& id, const std::string& value, std::int64_t amount) const {
    return Transaction{id, {{moving, value}, {"merchant", "m-" + id}}, amount};
  }

  Usage usage(const std::string& value, Period period) {
    return limits.usage(moving, Dimension{value}, period);
  }

  // This test's keys in the moving slot on `node`, split by what they are.
  struct SlotKeys {
    std::vector<std::string> records_and_sets, day, month, others;
  };
  SlotKeys keys_on(RedisServer& node, int slot) const {
    SlotKeys found;
    for (const std::string& key : cluster.keys_in_slot(slot, node)) {
      if (key.rfind(prefix, 0) != 0) {
        continue; // another test's
      }
      if (key.find(":tx:") != std::string::npos || key.find(":cs:") != std::string::npos) {
        found.records_and_sets.push_back(key);
      } else if (key.find(":day:") != std::string::npos) {
        found.day.push_back(key);
      } else if (key.find(":month:") != std::string::npos) {
        found.month.push_back(key);
      } else {
        found.others.push_back(key);
      }
    }
    return found;
  }
};

} // namespace

TEST_CASE_METHOD(HalfMovedSlot,
                 "a reversal during a key-by-key slot migration counts exactly once, in every "
                 "order of what moved first",
                 "[cluster][limits][migration]") {
  const Order order =
      GENERATE(Order::record_first, Order::counters_first, Order::one_counter_first);
  const Op op = GENERATE(Op::refund, Op::confirm, Op::cancel);
  INFO(name_of(op) << " with " << name_of(order));
  const std::string tag = std::string(name_of(op)).substr(0, 2) + std::to_string(int(order));
  const std::string value = "v" + tag;
  const std::string id = "t" + tag;

  // another payment's 300 that must stay counted, then the transaction of 600
  REQUIRE(limits.consume(tx("o" + tag, value, 300)).allowed());
  if (op == Op::refund) {
    REQUIRE(limits.consume(tx(id, value, 600)).allowed());
  } else {
    REQUIRE(limits.reserve(tx(id, value, 600)).allowed());
  }
  REQUIRE(usage(value, Period::day) == Usage{2, 900});

  const int slot = detail::key_slot(moving);
  RedisServer& source = cluster.owner_of(slot);
  RedisServer* target = nullptr;
  for (RedisServer* node : cluster.nodes()) {
    if (node->port() != source.port()) {
      target = node;
      break;
    }
  }
  REQUIRE(target != nullptr);
  const HalfMovedSlot::SlotKeys keys = keys_on(source, slot);
  REQUIRE(keys.day.size() == 1);
  REQUIRE(keys.month.size() == 1);
  REQUIRE(!keys.records_and_sets.empty());

  const std::int64_t tryagain_before =
      error_count(source, "TRYAGAIN") + error_count(*target, "TRYAGAIN");
  cluster.begin_migration(slot, source, *target);
  switch (order) {
  case Order::record_first: cluster.move_some_keys(keys.records_and_sets, source, *target); break;
  case Order::counters_first: {
    std::vector<std::string> counters = keys.day;
    counters.insert(counters.end(), keys.month.begin(), keys.month.end());
    cluster.move_some_keys(counters, source, *target);
    break;
  }
  case Order::one_counter_first: cluster.move_some_keys(keys.month, source, *target); break;
  }

  // The operation runs while the slot is half moved; the host retries with the same id.
  std::atomic<bool> done{false};
  auto running = std::async(std::launch::async, [&] {
    for (;;) {
      try {
        switch (op) {
        case Op::refund: limits.refund(id); break;
        case Op::confirm: limits.confirm(id, 400); break;
        case Op::cancel: limits.cancel(id); break;
        }
        done = true;
        return;
      } catch (const Error& e) {
        if (e.is_input_error()) {
          throw;
        }
        // not run, or not every share followed yet: the same id again (idempotent)
        std::this_thread::sleep_for(50ms);
      }
    }
  });
  std::this_thread::sleep_for(500ms);
  const bool done_half_moved = done.load();
  cluster.move_keys(slot, source, *target);
  cluster.finish_migration(slot, *target);
  REQUIRE_NOTHROW(running.get());

  // It met the migration guard while the keys it touches were on two nodes.
  CHECK_FALSE(done_half_moved);
  CHECK(error_count(source, "TRYAGAIN") + error_count(*target, "TRYAGAIN") > tryagain_before);

  // Exactly once: the other payment stays counted, the transaction counts what it should.
  const std::int64_t kept = op == Op::confirm ? 400 : 0;
  const std::int64_t count = op == Op::confirm ? 2 : 1;
  CHECK(usage(value, Period::day) == Usage{count, 300 + kept});
  CHECK(usage(value, Period::month) == Usage{count, 300 + kept});
  // a retry replays, giving nothing back again
  switch (op) {
  case Op::refund: CHECK(limits.refund(id).replayed); break;
  case Op::confirm: CHECK(limits.confirm(id, 400).replayed); break;
  case Op::cancel: {
    const CancelResult result = limits.cancel(id);
    CHECK(result.status == CancelResult::Status::cancelled);
    CHECK(result.replayed);
    break;
  }
  }
  CHECK(usage(value, Period::day) == Usage{count, 300 + kept});
  // and the quota is what is left: 1000 - 300 - kept, no more, no less
  CHECK(limits.consume(tx("n" + tag, value, 700 - kept)).allowed());
  CHECK_FALSE(limits.consume(tx("d" + tag, value, 1)).allowed());
}
