// The library resends a call idempotent by id whose reply was lost (RedisOptions::retry, with
// its defaults here): each test loses one reply through the fault proxy after the command ran
// (dropped: a timeout; cut mid-reply: a broken connection), and proves from the server (INFO
// commandstats, the keys) that the resend replayed it: the caller gets the first call's answer,
// marked replayed, and it took effect once. A call that is not idempotent is never resent.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <limitcounter/limitcounter.hpp>

#include "fault/resend_fixture.hpp"
#include "support/fault_proxy.hpp"
#include "support/probe.hpp"

using namespace std::chrono_literals;
using limitcounter::CancelResult;
using limitcounter::Dimension;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::LimitCounter;
using limitcounter::LimitCounterOptions;
using limitcounter::Outcome;
using limitcounter::Period;
using limitcounter::Redis;
using limitcounter::RedisOptions;
using limitcounter::Rule;
using limitcounter::RuleSet;
using limitcounter::Transaction;
using limitcounter::TransactionState;
using limitcounter::Usage;
using limitcounter::testing::command_calls;
using limitcounter::testing::error_of;
using limitcounter::testing::Fault;
using limitcounter::testing::FaultRule;
using limitcounter::testing::ResendFixture;
using limitcounter::testing::script_calls;

namespace {

struct LimitsResending : ResendFixture {
  LimitCounter limits{through, limitcounter::Calendar("UTC"), options()};

  LimitsResending() {
    limits.set_rules(
        RuleSet().add(Rule("day").where("merchant").per(Period::day).max_amount(1000)));
  }
  LimitCounterOptions options() const {
    LimitCounterOptions o;
    o.key_prefix = prefix;
    return o;
  }
  static Transaction payment(const std::string& id, std::int64_t amount) {
    return Transaction{id, {{"merchant", "m1"}}, amount};
  }
  Usage used() { return limits.usage("merchant", Dimension{"m1"}, Period::day); }
};

// Red packets under the fixture's keys, dead-lettered after `max_payout_attempts`.
struct PacketsResending : ResendFixture {
  limitcounter::RedPacketOptions options(int max_payout_attempts) const {
    limitcounter::RedPacketOptions o;
    o.key_prefix = prefix + "rp:";
    o.max_payout_attempts = max_payout_attempts;
    return o;
  }
  // Open for an hour.
  static limitcounter::PacketOptions packet() {
    limitcounter::PacketOptions o;
    o.expires_at = limitcounter::Clock::now() + 1h;
    return o;
  }
};

} // namespace

TEST_CASE_METHOD(LimitsResending,
                 "limits: a lost reply of consume, reserve, confirm, cancel, refund and adjust is "
                 "resent and replays the first decision once",
                 "[fault][resend][limits]") {
  fault = GENERATE(Fault::drop_reply, Fault::cut_mid_reply);
  const auto consumed = absorbed([&] { return limits.consume(payment("c-1", 100)); });
  CHECK(consumed.allowed());
  CHECK(consumed.replayed);
  CHECK(used() == Usage{1, 100});

  const auto reserved = absorbed([&] { return limits.reserve(payment("r-1", 300)); });
  CHECK(reserved.allowed());
  CHECK(reserved.replayed);
  CHECK(record_state(options(), "r-1") == TransactionState::reserved);

  const auto confirmed = absorbed([&] { return limits.confirm("r-1", 200); });
  CHECK(confirmed.replayed);
  CHECK(confirmed.amount == 200);
  CHECK(used() == Usage{2, 300});

  REQUIRE(limits.reserve(payment("r-2", 50)).allowed());
  const auto cancelled = absorbed([&] { return limits.cancel("r-2"); });
  CHECK(cancelled.status == CancelResult::Status::cancelled);
  CHECK(cancelled.replayed);
  CHECK(record_state(options(), "r-2") == TransactionState::cancelled);
  CHECK(used() == Usage{2, 300});

  const auto refunded = absorbed([&] { return limits.refund("r-1", 50, "refund-a"); });
  CHECK(refunded.replayed);
  CHECK(refunded.refunded_now == 50);
  CHECK(used() == Usage{2, 250});

  const auto adjusted = absorbed([&] {
    return limits.adjust("merchant", Dimension{"m1"}, Period::day, {"fix-1", 1, 5, "ops", "fix"});
  });
  CHECK(adjusted.replayed);
  CHECK(adjusted.after == Usage{3, 255});
  CHECK(used() == Usage{3, 255});
}

TEST_CASE_METHOD(LimitsResending,
                 "limits: consume_many's batch call whose reply was lost is resent, every "
                 "transaction replayed once",
                 "[fault][resend][limits]") {
  fault = GENERATE(Fault::drop_reply, Fault::cut_mid_reply);
  const std::vector<Transaction> batch{payment("m-0", 10), payment("m-1", 20), payment("m-2", 30)};
  const auto results = absorbed([&] { return limits.consume_many(batch); });
  REQUIRE(results.size() == 3);
  for (const auto& result : results) {
    REQUIRE(std::holds_alternative<limitcounter::Decision>(result));
    CHECK(std::get<limitcounter::Decision>(result).allowed());
    CHECK(std::get<limitcounter::Decision>(result).replayed);
  }
  CHECK(used() == Usage{3, 60});
}

// A refund reads its record before it sends its script call (to declare every key it touches):
// that read's lost reply is resent too, so the caller never hears "unknown" from a GET.
TEST_CASE_METHOD(LimitsResending,
                 "limits: a lost reply of the read before a refund is resent, the refund runs once",
                 "[fault][resend][limits]") {
  fault = GENERATE(Fault::drop_reply, Fault::cut_mid_reply);
  REQUIRE(limits.consume(payment("g-1", 100)).allowed());
  FaultRule rule;
  const std::string record = limits.keys().transaction("g-1");
  rule.matches = [record](const std::vector<std::string>& argv) {
    return argv.size() == 2 && argv[1] == record;
  };
  rule.fault = fault;
  proxy.add_rule(rule);
  const long long gets = command_calls(direct, "get");
  const long long scripts = script_calls(direct);
  const limitcounter::RefundResult refunded = limits.refund("g-1", 40, "r");
  CHECK(proxy.injected(fault) == 1);
  CHECK(command_calls(direct, "get") - gets >= 2); // the lost read and its resend
  CHECK(script_calls(direct) - scripts == 1);
  CHECK(refunded.refunded_now == 40);
  CHECK_FALSE(refunded.replayed);
  CHECK(used() == Usage{1, 60});
}

TEST_CASE_METHOD(LimitsResending,
                 "limits: replies lost past the attempts end in unknown, and it ran once",
                 "[fault][resend][limits]") {
  lose_replies(3); // the first send and both resends
  const long long before = script_calls(direct);
  const Error error = error_of([&] { limits.consume(payment("x-1", 100)); });
  CHECK(error.outcome() == Outcome::unknown);
  CHECK(error.code() == errc::timeout);
  CHECK_THAT(error.what(), Catch::Contains("sent 3 times"));
  CHECK(script_calls(direct) - before == 3);
  CHECK(used() == Usage{1, 100});
  CHECK(limits.consume(payment("x-1", 100)).replayed); // the host's retry, as before
}

TEST_CASE_METHOD(LimitsResending,
                 "limits: add and take_daily_cap, not idempotent, are never resent after a lost "
                 "reply",
                 "[fault][resend][limits]") {
  for (const auto& call : std::vector<std::function<void()>>{
           [&] { limits.add("merchant", Dimension{"m1"}, {Period::day}, 1, 10); },
           [&] { limits.take_daily_cap("sms", "a1", 10); }}) {
    lose_replies();
    const long long before = script_calls(direct);
    const Error error = error_of(call);
    CHECK(error.outcome() == Outcome::unknown);
    CHECK(script_calls(direct) - before == 1);
  }
  CHECK(used() == Usage{1, 10});                  // the add ran once
  CHECK(limits.cap_usage("sms", "a1").used == 1); // the take too
}

TEST_CASE_METHOD(ResendFixture,
                 "wallet: a lost reply of deduct, credit, rollback, freeze, unfreeze and "
                 "deduct_many is resent and applies once",
                 "[fault][resend][wallet]") {
  fault = GENERATE(Fault::drop_reply, Fault::cut_mid_reply);
  limitcounter::WalletOptions options;
  options.key_prefix = prefix + "wal:";
  limitcounter::Wallet wallet(through, options);
  REQUIRE(wallet.load("u1", {1000, 1, 0}));
  const auto balance = [&] { return wallet.account("u1")->balance; };

  const auto deducted = absorbed([&] { return wallet.deduct("u1", "o1", 100); });
  CHECK(deducted.replayed);
  CHECK(deducted.balance == 900);

  const auto credited = absorbed([&] { return wallet.credit("u1", "o2", 50); });
  CHECK(credited.replayed);
  CHECK(balance() == 950);

  const auto rolled_back = absorbed([&] { return wallet.rollback("u1", "o1"); });
  CHECK(rolled_back.status == limitcounter::RollbackResult::Status::rolled_back);
  CHECK(rolled_back.replayed);
  CHECK(balance() == 1050);

  // whole pipeline resent: its four calls run twice, the second time as replays (cut mid-reply,
  // the calls after the first may not have run before the cut: then they run once, afresh)
  const std::vector<limitcounter::WalletOrder> batch{
      {"u1", "b1", 10}, {"u1", "b2", 20}, {"u1", "b3", 30}, {"u1", "b4", 40}};
  const auto deducted_many =
      absorbed([&] { return wallet.deduct_many(batch); }, 8, fault == Fault::drop_reply ? 8 : 5);
  for (const auto& result : deducted_many) {
    REQUIRE(std::holds_alternative<limitcounter::WalletResult>(result));
  }
  CHECK(std::get<limitcounter::WalletResult>(deducted_many.front()).replayed);
  CHECK(balance() == 950);
  // one journal event per change: deduct, credit, rollback and the four of the batch
  CHECK(direct.command({"XLEN", wallet.keys().journal(wallet.keys().partition_of("u1"))})
            .as_integer() == 7);

  // the first send froze the account: the resend finds it frozen and changes nothing
  CHECK_FALSE(absorbed([&] { return wallet.freeze("u1", "fraud review"); }));
  CHECK(wallet.account("u1")->frozen);
  CHECK_FALSE(absorbed([&] { return wallet.unfreeze("u1", "cleared"); }));
  CHECK_FALSE(wallet.account("u1")->frozen);
  // and one journal event each
  CHECK(direct.command({"XLEN", wallet.keys().journal(wallet.keys().partition_of("u1"))})
            .as_integer() == 9);
}

TEST_CASE_METHOD(PacketsResending,
                 "red packets: a lost reply of create, grab, grab_many, close, payout ack, "
                 "fail and release is resent and replays once",
                 "[fault][resend][red_packet]") {
  fault = GENERATE(Fault::drop_reply, Fault::cut_mid_reply);
  limitcounter::RedPacketPool pool(through, options(5));
  const std::string list = pool.keys().packet("p1", "list");

  // the begin's reply is lost: begin, its resend (replayed), then the chunk
  const auto created = absorbed([&] { return pool.create("p1", {30, 20, 50}, packet()); }, 3);
  CHECK(created.replayed);
  CHECK(direct.command({"LLEN", list}).as_integer() == 3);

  const auto grabbed = absorbed([&] { return pool.grab("p1", "alice"); });
  CHECK(grabbed.status == limitcounter::GrabResult::Status::granted);
  CHECK(grabbed.replayed);
  CHECK(direct.command({"LLEN", list}).as_integer() == 2); // one packet popped, once
  // grab_many pipelines its grabs: the pipeline is resent whole
  const auto many = absorbed([&] { return pool.grab_many("p1", {"bob"}); });
  REQUIRE(many.size() == 1);
  REQUIRE(std::holds_alternative<limitcounter::GrabResult>(many[0]));
  const auto other = std::get<limitcounter::GrabResult>(many[0]);
  CHECK(other.status == limitcounter::GrabResult::Status::granted);
  CHECK(other.replayed);
  CHECK(direct.command({"LLEN", list}).as_integer() == 1);

  const auto closed = absorbed([&] { return pool.close("p1"); });
  CHECK(closed.replayed);
  CHECK(closed.packets_left == 1);
  CHECK(closed.leftover == 100 - grabbed.amount - other.amount);

  const std::uint32_t partition = pool.keys().partition_of("p1");
  const auto tasks = pool.take_payouts(partition, 10);
  REQUIRE(tasks.size() == 2);
  CHECK(absorbed([&] { return pool.ack_payout(tasks[0]); }));
  CHECK(direct.command({"HLEN", pool.keys().packet("p1", "paid")}).as_integer() == 1);

  CHECK_FALSE(absorbed([&] { return pool.fail_payout(tasks[1]); })); // "retry", not dead
  const auto again = pool.take_payouts(partition, 10, limitcounter::Clock::now() + 1h);
  REQUIRE(again.size() == 1); // the paid task is gone, the failed one back once
  CHECK(again[0].user_id == tasks[1].user_id);
  CHECK(again[0].attempt == 2); // one failed attempt counted, not two

  CHECK(absorbed([&] { return pool.release_payout(again[0]); })); // "replayed", not "stale"
  const auto released = pool.take_payouts(partition, 10);
  REQUIRE(released.size() == 1);   // handed back, due now
  CHECK(released[0].attempt == 2); // a release counts no attempt
  CHECK(released[0].lease == again[0].lease + 1);
}

TEST_CASE_METHOD(PacketsResending,
                 "red packets: a lost reply of requeue_payout is resent and requeues the dead "
                 "payout once",
                 "[fault][resend][red_packet]") {
  fault = GENERATE(Fault::drop_reply, Fault::cut_mid_reply);
  limitcounter::RedPacketPool pool(through, options(1));
  REQUIRE(pool.create("p1", {40}, packet()).created_now);
  REQUIRE(pool.grab("p1", "alice").status == limitcounter::GrabResult::Status::granted);
  const std::uint32_t partition = pool.keys().partition_of("p1");
  const auto tasks = pool.take_payouts(partition, 10);
  REQUIRE(tasks.size() == 1);
  REQUIRE(pool.fail_payout(tasks[0])); // dead at its first failure
  REQUIRE(pool.dead_payouts(partition).size() == 1);

  // the first send requeued it: the resend finds it waiting in its queue
  const auto requeued = absorbed([&] { return pool.requeue_payout("p1", "alice"); });
  CHECK(requeued.status == limitcounter::RequeueResult::Status::requeued);
  CHECK(requeued.replayed);
  CHECK(pool.dead_payouts(partition).empty());
  const auto again = pool.take_payouts(partition, 10);
  REQUIRE(again.size() == 1); // queued once
  CHECK(again[0].user_id == "alice");
  CHECK(again[0].amount == 40);
  CHECK(again[0].attempt == 1); // its attempts counted from zero again
}
