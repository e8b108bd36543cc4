// Refunds, confirms and cancels of a transaction whose share slot is half moved: the slot is
// marked IMPORTING/MIGRATING and its keys are moved one MIGRATE ... KEYS batch at a time, the
// operation runs in between, then the rest moves and the slot is handed over. Three orders of
// what moves first: the share's record and counter set, its counters, one counter of two.
// Whatever the order, the operation must wait (TRYAGAIN, retried) until the keys it touches are
// on one node, and then count exactly once: nothing given back twice, nothing recorded as done
// that gave nothing back. The same holds for the sweep's void of a transaction abandoned between
// its begin and its finish: it is not recorded as done while the slot is half moved, and a
// later sweep completes it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <limitcounter/limitcounter.hpp>

#include "redis/key_slot.hpp"
#include "support/fault_proxy.hpp"
#include "support/outcome.hpp"
#include "support/probe.hpp"
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

struct HalfMovedSlot {
  RedisCluster& cluster = shared_cluster();
  std::string prefix = unique_prefix() + "hm:";
  // The shape whose slot moves: two counters (day, month) in one share.
  const std::string moving = "halfmoved";
  Redis redis{cluster.options()};
  LimitCounter limits{redis, Calendar("UTC"), counter_options()};

  HalfMovedSlot() {
    REQUIRE(detail::key_slot(moving) != detail::key_slot("merchant"));
    limits.set_rules(rules());
  }

  LimitCounterOptions counter_options() const {
    LimitCounterOptions options;
    options.key_prefix = prefix;
    return options;
  }
  RuleSet rules() const {
    std::vector<std::string> attributes = RuleSet::default_attributes();
    attributes.push_back(moving);
    return RuleSet(attributes)
        .add(Rule("moving-day").where(moving).per(Period::day).max_amount(1000))
        .add(Rule("moving-month").where(moving).per(Period::month).max_amount(1'000'000))
        .add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(1'000'000));
  }

  Transaction tx(const std::string& id, const std::string& value, std::int64_t amount) const {
    return Transaction{id, {{moving, value}, {"merchant", "m-" + id}}, amount};
  }

  Usage usage(const std::string& value, Period period) {
    return limits.usage(moving, Dimension{value}, period);
  }

  // The day's quota of `value` has exactly `left` of its 1000 left: no more, no less.
  void check_left(const std::string& tag, const std::string& value, std::int64_t left) {
    CHECK(limits.consume(tx("n" + tag, value, left)).allowed());
    CHECK_FALSE(limits.consume(tx("d" + tag, value, 1)).allowed());
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

  // Runs `step` as a host does (again with the same id after an error) while the moving slot is
  // half moved in `order`: it must not end before the rest of the slot has moved, and must meet
  // the migration guard. `while_half_moved` looks at the server once the step had its chance.
  template <typename Step>
  void run_across_half_move(
      Order order, Step&& step, const std::function<void()>& while_half_moved = [] {}) {
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
    const SlotKeys keys = keys_on(source, slot);
    // each window's hash (and beside it the window's hold set, if a reservation holds it)
    const auto hashes = [](const std::vector<std::string>& window_keys) {
      return std::count_if(window_keys.begin(), window_keys.end(), [](const std::string& key) {
        return key.size() < 6 || key.compare(key.size() - 6, 6, ":holds") != 0;
      });
    };
    REQUIRE(hashes(keys.day) == 1);
    REQUIRE(hashes(keys.month) == 1);
    REQUIRE(!keys.records_and_sets.empty());

    const auto tryagains = [&] {
      return info_count(source, "errorstats", "errorstat_TRYAGAIN:count=") +
             info_count(*target, "errorstats", "errorstat_TRYAGAIN:count=");
    };
    const std::int64_t tryagain_before = tryagains();
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

    std::atomic<bool> done{false};
    auto running = std::async(std::launch::async, [&] {
      for (;;) {
        try {
          step();
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
    // It meets the migration guard while the keys it touches are on two nodes, and gets time to
    // retry (a step that counted a refused call as done would end now).
    const bool met_guard = eventually([&] { return tryagains() > tryagain_before; });
    std::this_thread::sleep_for(500ms);
    const bool done_half_moved = done.load();
    CHECK_NOTHROW(while_half_moved()); // the slot is handed over whatever it finds
    cluster.move_keys(slot, source, *target);
    cluster.finish_migration(slot, *target);
    REQUIRE_NOTHROW(running.get());

    CHECK(met_guard);
    CHECK_FALSE(done_half_moved);
  }
};

// The same, with a consume abandoned between its begin and its finish: its client's connection
// is cut instead of sending the finish (and any resend of it), so its home record stays pending
// with both shares counted, for the sweep to void.
struct AbandonedInHalfMovedSlot : HalfMovedSlot {
  // Every call fails within `timeout` (no breaker in between): the test decides what comes next.
  static RedisOptions impatient(RedisOptions options, std::chrono::milliseconds timeout) {
    options.command_timeout = timeout;
    options.breaker_failures = 0;
    return options;
  }
  ClusterFaultProxy proxies{cluster};
  Redis through{impatient(proxies.options(), 300ms)};
  LimitCounter abandoning{through, Calendar("UTC"), counter_options()};
  // A sweep that gives up on TRYAGAIN well before the slot is handed over: an attempt that fails
  // while it is half moved must leave the transaction to the next one.
  Redis sweeping{impatient(cluster.options(), 200ms)};
  LimitCounter sweeper{sweeping, Calendar("UTC"), counter_options()};

  AbandonedInHalfMovedSlot() {
    abandoning.set_rules(rules());
    sweeper.set_rules(rules());
    // a first script call answered NOSCRIPT (or "Function not found") would be one call more on the
    // home record
    cluster.load_scripts();
  }

  std::string home(const std::string& id) const { return limits.keys().transaction(id); }

  void abandon(const Transaction& transaction) {
    REQUIRE(detail::key_slot(transaction.id) != detail::key_slot(moving));
    FaultProxy& proxy = proxies.proxy_of(cluster.owner_of(detail::key_slot(transaction.id)));
    proxy.add_rule({script_call_with_key_prefix(home(transaction.id)), Fault::forward, 1});
    proxy.add_rule(
        {script_call_with_key_prefix(home(transaction.id)), Fault::close_before_forward, 1000});
    CHECK(error_of([&] { abandoning.consume(transaction); }).outcome() == Outcome::unknown);
    proxy.clear();
    REQUIRE(record_field(redis, home(transaction.id), "state") == "pending");
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

  // The operation runs while the slot is half moved; the host retries with the same id.
  run_across_half_move(order, [&] {
    switch (op) {
    case Op::refund: limits.refund(id); break;
    case Op::confirm: limits.confirm(id, 400); break;
    case Op::cancel: limits.cancel(id); break;
    }
  });

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
  check_left(tag, value, 1000 - 300 - kept);
}

TEST_CASE_METHOD(AbandonedInHalfMovedSlot,
                 "the sweep's void of an abandoned transaction during a key-by-key slot "
                 "migration gives back exactly once, in every order of what moved first",
                 "[cluster][limits][migration][proxy][sweep]") {
  const Order order =
      GENERATE(Order::record_first, Order::counters_first, Order::one_counter_first);
  INFO("void with " << name_of(order));
  const std::string tag = "vo" + std::to_string(int(order));
  const std::string value = "v" + tag;
  const std::string id = "t" + tag;

  // another payment's 300 that must stay counted, then the abandoned 600
  REQUIRE(limits.consume(tx("o" + tag, value, 300)).allowed());
  abandon(tx(id, value, 600));
  REQUIRE(usage(value, Period::day) == Usage{2, 900});

  // The sweep runs while the slot is half moved (again after an error, as a host's timer would).
  std::vector<InterruptedFanOut> swept;
  run_across_half_move(
      order, [&] { swept = sweeper.finish_interrupted(0s); },
      [&] {
        // taken (voided) but still open: the void of the moving share is not recorded as done
        CHECK(record_field(redis, home(id), "state") == "voided");
        const std::string open = record_field(redis, home(id), "open");
        CHECK(!open.empty());
        CHECK(open.rfind('-', 0) != 0);
        CHECK(usage(value, Period::day) == Usage{2, 900});
      });

  CHECK(std::any_of(swept.begin(), swept.end(), [&](const InterruptedFanOut& fan_out) {
    return fan_out.transaction_id == id && fan_out.abandoned &&
           fan_out.state == TransactionState::voided;
  }));
  CHECK(record_field(redis, home(id), "open").rfind('-', 0) == 0); // closed
  // Exactly what it was before the transaction, in every window of the moving share and the other.
  CHECK(usage(value, Period::day) == Usage{1, 300});
  CHECK(usage(value, Period::month) == Usage{1, 300});
  CHECK(limits.usage("merchant", Dimension{"m-" + id}, Period::day) == Usage{});
  CHECK(sweeper.finish_interrupted(0s).empty()); // nothing left to give back

  // a retry of the id learns that the payment did not happen, and moves nothing
  const Decision replay = limits.consume(tx(id, value, 600));
  CHECK(replay.verdict == Decision::Verdict::cancelled);
  CHECK(replay.replayed);
  CHECK(replay.state == TransactionState::voided);
  CHECK(outcome(limits.cancel(id)) == std::pair(CancelResult::Status::cancelled, true));
  CHECK(usage(value, Period::day) == Usage{1, 300});
  check_left(tag, value, 1000 - 300);
}
