// The library calls behind limitctl: LimitCounter::adjust (audited, idempotent corrections),
// LimitCounter::transaction_record, RedPacketPool::status and requeue_payout.
#include <algorithm>

#include <catch2/catch.hpp>

#include <limitcounter/limit_counter.hpp>
#include <limitcounter/red_packet.hpp>

#include "support/outcome.hpp"
#include "support/redis_server.hpp"
#include "support/topology.hpp"

using namespace std::chrono_literals;
using limitcounter::Clock;
using limitcounter::CounterCorrection;
using limitcounter::Dimension;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::LimitCounter;
using limitcounter::PacketState;
using limitcounter::Period;
using limitcounter::Redis;
using limitcounter::Reply;
using limitcounter::Rule;
using limitcounter::RuleSet;
using limitcounter::Transaction;
using limitcounter::TransactionState;
using limitcounter::Usage;
using limitcounter::testing::outcome;
using limitcounter::testing::test_options;
using limitcounter::testing::unique_prefix;

namespace {

struct CounterFixture {
  Redis redis{test_options()};
  LimitCounter counter{redis, limitcounter::Calendar("Asia/Shanghai"), options()};
  Dimension dimension{"Ali", "Deduct", "cmb"};

  static limitcounter::LimitCounterOptions options() {
    limitcounter::LimitCounterOptions o;
    o.key_prefix = unique_prefix() + "ops:";
    return o;
  }
  // The audit stream's entries as field maps.
  std::vector<std::map<std::string, std::string>> audit(const std::string& counter_name) {
    std::vector<std::map<std::string, std::string>> entries;
    const Reply reply = redis.command({"XRANGE", counter.keys().audit(counter_name), "-", "+"});
    for (const Reply& entry : reply.as_array()) {
      std::map<std::string, std::string> fields;
      const auto& items = entry.at(1).as_array();
      for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
        fields[items[i].as_string()] = items[i + 1].as_string();
      }
      entries.push_back(fields);
    }
    return entries;
  }
};

} // namespace

TEST_CASE_METHOD(CounterFixture, "adjust moves the counter and writes its audit entry, once",
                 "[operations][redis]") {
  counter.add("channel", dimension, {Period::day}, 3, 900);
  const CounterCorrection correction{"fix-1", -1, -300, "alice", "double-counted payment 42"};
  const auto first = counter.adjust("channel", dimension, Period::day, correction);
  CHECK(first.before == Usage{3, 900});
  CHECK(first.after == Usage{2, 600});
  CHECK_FALSE(first.replayed);
  CHECK(counter.usage("channel", dimension, Period::day) == Usage{2, 600});

  const auto entries = audit("channel");
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].at("id") == "fix-1");
  CHECK(entries[0].at("author") == "alice");
  CHECK(entries[0].at("reason") == "double-counted payment 42");
  CHECK(entries[0].at("before") == "3:900");
  CHECK(entries[0].at("after") == "2:600");
  CHECK(entries[0].at("dimension") == "Ali+Deduct+cmb");
  CHECK(entries[0].at("window") == first.window.id);

  // A retry after a lost reply: the first result, nothing moved twice, no second entry.
  const auto again = counter.adjust("channel", dimension, Period::day, correction);
  CHECK(again.replayed);
  CHECK(again.after == Usage{2, 600});
  CHECK(again.audit_id == first.audit_id);
  CHECK(counter.usage("channel", dimension, Period::day) == Usage{2, 600});
  CHECK(audit("channel").size() == 1);

  // The same id for another correction is a conflict, and writes nothing.
  CounterCorrection other = correction;
  other.amount = -100;
  try {
    counter.adjust("channel", dimension, Period::day, other);
    FAIL("a reused correction id was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == errc::conflict);
  }
  CHECK(counter.usage("channel", dimension, Period::day) == Usage{2, 600});
}

TEST_CASE_METHOD(CounterFixture, "adjust refuses what it cannot do, before or without writing",
                 "[operations][redis]") {
  counter.add("channel", dimension, {Period::day}, 1, 100);
  const auto refused = [&](CounterCorrection correction, errc code, const std::string& named) {
    try {
      counter.adjust("channel", dimension, Period::day, correction);
      FAIL("accepted: " + correction.id);
    } catch (const Error& e) {
      CHECK(e.code() == code);
      CHECK_THAT(e.what(), Catch::Contains(named));
    }
  };
  refused({"neg", 0, -101, "alice", "too much"}, errc::invalid_argument, "amount -1");
  refused({"empty-reason", 1, 0, "alice", ""}, errc::invalid_argument, "reason");
  refused({"no-change", 0, 0, "alice", "nothing"}, errc::invalid_argument, "changes nothing");
  refused({"big", 0, std::int64_t{1} << 53, "alice", "huge"}, errc::precision_overflow,
          "9007199254740992");
  refused({"bad id!{", 1, 0, "alice", "x"}, errc::invalid_argument, "correction id");
  refused({"c1", 1, 0, "alice", "x\xc2\x9b"}, errc::invalid_argument,
          "reason \"x\\u009b\" contains a control character");
  refused({"nel", 1, 0, "al\xc2\x85ice", "x"}, errc::invalid_argument,
          "author \"al\\u0085ice\" contains a control character");
  try {
    counter.adjust("channel", dimension, Period::day, {"old", 1, 0, "alice", "late"},
                   Clock::now() - 72h);
    FAIL("a closed window was adjusted");
  } catch (const Error& e) {
    CHECK(e.code() == errc::window_closed);
  }
  CHECK(counter.usage("channel", dimension, Period::day) == Usage{1, 100});
  CHECK(audit("channel").empty());
  CHECK(redis.command({"EXISTS", counter.keys().correction("channel", "neg")}).as_integer() == 0);
}

TEST_CASE_METHOD(CounterFixture, "transaction_record reads state, amount, windows and refunds",
                 "[operations][redis]") {
  RuleSet rules;
  rules.add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(1000));
  rules.add(Rule("dept-month").where("dept").per(Period::month).max_count(100));
  counter.set_rules(rules);
  const auto at = Clock::now();
  Transaction paid{"pay-1", {{"merchant", "m1"}, {"dept", "cmb"}}, 700, at};
  REQUIRE(counter.consume(paid).allowed());
  counter.refund("pay-1", 200, "r-1");
  Transaction over{"pay-2", {{"merchant", "m1"}, {"dept", "cmb"}}, 600, at};
  REQUIRE_FALSE(counter.consume(over).allowed());

  const auto record = counter.transaction_record("pay-1");
  REQUIRE(record);
  CHECK(record->state == TransactionState::consumed);
  CHECK(record->amount == 700);
  CHECK(record->refunded == 200);
  REQUIRE(record->refunds.size() == 1);
  CHECK(record->refunds[0] == std::pair<std::string, std::int64_t>{"r-1", 200});
  REQUIRE(record->decision);
  CHECK(record->decision->allowed());
  // the windows it counted in, by their keys (the compact record keeps no rule statuses)
  const auto& keys = counter.keys();
  const std::string day = counter.calendar().window(Period::day, at).id;
  const std::string month = counter.calendar().window(Period::month, at).id;
  std::vector<std::string> moved{keys.window(keys.tag("merchant", "m1"), Period::day, day),
                                 keys.window(keys.tag("dept", "cmb"), Period::month, month)};
  std::vector<std::string> counted = record->counter_keys;
  std::sort(moved.begin(), moved.end());
  std::sort(counted.begin(), counted.end());
  CHECK(counted == moved);
  // kept for the replay horizon (24 h), not until the month's end
  REQUIRE(record->expires_at);
  CHECK(*record->expires_at <= Clock::now() + 24h + 1s);
  CHECK(*record->expires_at >= at + 24h - 1s);

  const auto denied = counter.transaction_record("pay-2");
  REQUIRE(denied);
  CHECK(denied->state == TransactionState::denied);
  REQUIRE(denied->decision);
  REQUIRE(denied->decision->denial);
  CHECK(denied->decision->denial->rule == "merchant-day");
  CHECK(denied->counter_keys.empty());

  CHECK_FALSE(counter.transaction_record("never-seen"));
  CHECK_THROWS_AS(counter.transaction_record("bad id"), Error);
}

namespace {

struct PoolFixture {
  Redis redis{test_options()};
  limitcounter::RedPacketPool pool{redis, options()};

  static limitcounter::RedPacketOptions options() {
    limitcounter::RedPacketOptions o;
    o.key_prefix = unique_prefix() + "rp:";
    o.partitions = 4;
    o.max_payout_attempts = 2;
    o.payout_backoff = 1ms;
    return o;
  }
};

} // namespace

TEST_CASE_METHOD(PoolFixture, "packet status reads what is left, grabs and state",
                 "[operations][redis][redpacket]") {
  CHECK_FALSE(pool.status("nothing"));
  pool.create("st-1", {100, 200, 300});
  pool.grab("st-1", "ann");
  const auto open = pool.status("st-1");
  REQUIRE(open);
  CHECK(open->state == PacketState::open);
  CHECK(to_string(open->state) == "open");
  CHECK(open->total == 600);
  CHECK(open->count == 3);
  CHECK(open->packets_left == 2);
  CHECK(open->grabs == 1);
  const std::int64_t taken = 600 - open->amount_left;
  CHECK((taken == 100 || taken == 200 || taken == 300));
  CHECK(pool.status("st-1", Clock::now() + 48h)->state == PacketState::expired);
  const auto closed_result = pool.close("st-1");
  const auto closed = pool.status("st-1");
  CHECK(closed->state == PacketState::closed);
  CHECK(closed->amount_left == closed_result.leftover);
  CHECK(closed->packets_left == 2);
}

TEST_CASE_METHOD(PoolFixture, "requeue_payout moves a dead payout back to its queue, once",
                 "[operations][redis][redpacket]") {
  pool.create("rq-1", {50});
  REQUIRE(pool.grab("rq-1", "bob").status == limitcounter::GrabResult::Status::granted);
  const auto partition = pool.keys().partition_of("rq-1");
  const auto now = Clock::now();
  for (int attempt = 1; attempt <= 2; ++attempt) {
    const auto tasks = pool.take_payouts(partition, 10, now + attempt * 1s);
    REQUIRE(tasks.size() == 1);
    pool.fail_payout(tasks[0], now + attempt * 1s);
  }
  REQUIRE(pool.dead_payouts(partition) == std::vector<std::string>{"rq-1:bob:50:2"});
  CHECK(outcome(pool.requeue_payout("rq-1", "nobody")) ==
        std::pair(limitcounter::RequeueResult::Status::not_dead, false));

  CHECK(outcome(pool.requeue_payout("rq-1", "bob", now + 5s)) ==
        std::pair(limitcounter::RequeueResult::Status::requeued, false));
  CHECK(pool.dead_payouts(partition).empty());
  // A retry (a lost reply) changes nothing more, and says the task was requeued, while it
  // waits and while it is in flight.
  CHECK(outcome(pool.requeue_payout("rq-1", "bob", now + 5s)) ==
        std::pair(limitcounter::RequeueResult::Status::requeued, true));
  auto tasks = pool.take_payouts(partition, 10, now + 6s);
  REQUIRE(tasks.size() == 1);
  CHECK(tasks[0].user_id == "bob");
  CHECK(tasks[0].amount == 50);
  CHECK(tasks[0].attempt == 1);
  CHECK(outcome(pool.requeue_payout("rq-1", "bob", now + 6s)) ==
        std::pair(limitcounter::RequeueResult::Status::requeued, true));

  // Dead again: a requeue moves it back again.
  pool.fail_payout(tasks[0], now + 6s);
  tasks = pool.take_payouts(partition, 10, now + 8s);
  REQUIRE(tasks.size() == 1);
  REQUIRE(pool.fail_payout(tasks[0], now + 8s)); // dead-lettered
  CHECK(outcome(pool.requeue_payout("rq-1", "bob", now + 9s)) ==
        std::pair(limitcounter::RequeueResult::Status::requeued, false));
  tasks = pool.take_payouts(partition, 10, now + 9s);
  REQUIRE(tasks.size() == 1);
  CHECK(pool.ack_payout(tasks[0], now + 9s));
  CHECK(pool.take_payouts(partition, 10, now + 60s).empty());
  // Paid: nothing of the task is left, and a late retry is not_dead.
  CHECK(redis.command({"HLEN", pool.keys().payout(partition, "tasks")}).as_integer() == 0);
  CHECK(outcome(pool.requeue_payout("rq-1", "bob", now + 60s)) ==
        std::pair(limitcounter::RequeueResult::Status::not_dead, false));
}
