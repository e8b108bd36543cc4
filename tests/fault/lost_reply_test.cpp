// The fault that matters most for money: the command ran on Redis, its reply never came
// back. Each test loses one reply through the fault proxy, proves from the server (the key
// the command wrote, INFO commandstats) that the command ran, and retries with the same id
// as a careful host would: the retry applies nothing twice and returns the first result.
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/limitcounter.hpp>

#include "support/fault_proxy.hpp"
#include "support/probe.hpp"
#include "support/proxied_server.hpp"

using namespace std::chrono_literals;
using limitcounter::CancelResult;
using limitcounter::Decision;
using limitcounter::Dimension;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::FailurePolicy;
using limitcounter::LimitCounter;
using limitcounter::LimitCounterOptions;
using limitcounter::Outcome;
using limitcounter::Period;
using limitcounter::Redis;
using limitcounter::RedisOptions;
using limitcounter::Reply;
using limitcounter::Rule;
using limitcounter::RuleSet;
using limitcounter::Transaction;
using limitcounter::TransactionState;
using limitcounter::Usage;
using limitcounter::testing::command_calls;
using limitcounter::testing::error_of;
using limitcounter::testing::Fault;
using limitcounter::testing::FaultProxy;
using limitcounter::testing::FaultRule;
using limitcounter::testing::ProxiedServer;
using limitcounter::testing::script_call_with_key_prefix;
using limitcounter::testing::script_calls;

namespace {

// A server, a proxy in front of it, a client through the proxy with a short command timeout,
// and a direct client for the server's side of the story.
struct LostReplyFixture : ProxiedServer {
  Redis through{through_proxy(300ms)};

  /// Loses the reply of the next script call on this fixture's keys; the call runs.
  void lose_next_reply() {
    FaultRule rule;
    rule.matches = script_call_with_key_prefix(prefix);
    rule.fault = Fault::drop_reply;
    proxy.add_rule(rule);
  }

  /// Runs `call` with the next reply lost: it throws Outcome::unknown, and the server ran
  /// exactly `scripts` scripts for it (the last of them is the one whose reply was lost).
  template <typename Call> void run_with_lost_reply(Call&& call, long long scripts = 1) {
    lose_next_reply();
    const long long before = script_calls(direct);
    const Error error = error_of(call);
    CHECK(error.outcome() == Outcome::unknown);
    CHECK(error.code() == errc::timeout);
    CHECK(proxy.injected(Fault::drop_reply) >= 1);
    CHECK(script_calls(direct) - before == scripts); // it ran
  }
};

struct LimitsThroughProxy : LostReplyFixture {
  LimitCounter limits{through, limitcounter::Calendar("UTC"), options()};

  LimitCounterOptions options() const {
    LimitCounterOptions o;
    o.key_prefix = prefix;
    return o;
  }
  Transaction payment(const std::string& id, std::int64_t amount) const {
    Transaction tx;
    tx.id = id;
    tx.attributes = {{"merchant", "m1"}};
    tx.amount = amount;
    return tx;
  }
  // `count` payments of `amount`, ids `<id_prefix>0`, `<id_prefix>1`...
  std::vector<Transaction> payments(const std::string& id_prefix, int count,
                                    std::int64_t amount) const {
    std::vector<Transaction> batch;
    for (int i = 0; i < count; ++i) {
      batch.push_back(payment(id_prefix + std::to_string(i), amount));
    }
    return batch;
  }
  // The second batch call of consume_many(batch) (batch calls of 64): its first key is
  // transaction 64's record.
  limitcounter::testing::CommandMatcher second_batch_call(const std::vector<Transaction>& batch) {
    return script_call_with_key_prefix(limits.keys().transaction(batch.at(64).id));
  }
  Usage used() { return limits.usage("merchant", Dimension{"m1"}, Period::day); }
  TransactionState record_state(const std::string& id) {
    return ProxiedServer::record_state(options(), id);
  }
};

RuleSet day_limit(FailurePolicy policy, double share = 0.0) {
  return RuleSet().add(Rule("day")
                           .where("merchant")
                           .per(Period::day)
                           .max_amount(1000)
                           .on_redis_failure(policy, share));
}

} // namespace

TEST_CASE_METHOD(LimitsThroughProxy,
                 "consume: a lost reply is unknown, never a failure-policy decision; the retry "
                 "replays once",
                 "[fault][lost_reply][limits]") {
  for (const FailurePolicy policy : {FailurePolicy::deny, FailurePolicy::allow}) {
    limits.set_rules(day_limit(policy));
    const std::string id = std::string("c-") + (policy == FailurePolicy::deny ? "deny" : "allow");
    const Transaction tx = payment(id, 100);
    run_with_lost_reply([&] { limits.consume(tx); });
    CHECK(record_state(id) == TransactionState::consumed); // Redis consumed it

    const Decision retry = limits.consume(tx);
    CHECK(retry.replayed);
    CHECK(retry.allowed());
    CHECK_FALSE(retry.degraded);
  }
  CHECK(used() == Usage{2, 200});
}

TEST_CASE_METHOD(LimitsThroughProxy,
                 "consume with the exhausted cache: the retry of a lost reply is replayed by "
                 "Redis, not denied from the cache",
                 "[fault][lost_reply][limits][exhausted_cache]") {
  LimitCounterOptions cached_options = options();
  cached_options.exhausted_cache.enabled = true;
  cached_options.exhausted_cache.max_staleness = 1h; // the entry outlives the test
  LimitCounter cached{through, limitcounter::Calendar("UTC"), cached_options};
  cached.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_count(1)));
  const Transaction tx = payment("x-1", 100);
  run_with_lost_reply([&] { cached.consume(tx); });
  CHECK(record_state("x-1") == TransactionState::consumed);     // it took the only slot
  REQUIRE_FALSE(cached.consume(payment("x-2", 100)).allowed()); // Redis: full, now cached
  REQUIRE(cached.consume(payment("x-3", 100)).cached);

  const Decision retry = cached.consume(tx);
  CHECK(retry.allowed()); // what Redis decided for x-1
  CHECK(retry.replayed);
  CHECK_FALSE(retry.cached);
  CHECK(cached.consume(payment("x-4", 100)).cached); // others are still denied here
}

TEST_CASE_METHOD(LimitsThroughProxy,
                 "consume with a local share: a lost reply is never counted "
                 "locally",
                 "[fault][lost_reply][limits][local]") {
  limits.set_rules(day_limit(FailurePolicy::local, 0.5));
  const Transaction tx = payment("local-1", 100);
  run_with_lost_reply([&] { limits.consume(tx); });
  CHECK(limits.consume(tx).replayed);
  CHECK(limits.consume(payment("local-2", 1)).allowed());
  // nothing was taken from the local share: no report ever reached Redis
  CHECK(direct.command({"EXISTS", limits.keys().local_reports("merchant")}).as_integer() == 0);
  CHECK(used() == Usage{2, 101});
}

TEST_CASE_METHOD(LimitsThroughProxy, "a local-fallback report whose reply was lost adds once",
                 "[fault][lost_reply][limits][local]") {
  limits.set_rules(day_limit(FailurePolicy::local, 0.5));
  REQUIRE(limits.consume(payment("up", 10)).allowed());

  // an outage: nothing reaches Redis, the local share decides
  proxy.refuse_connections(true);
  proxy.cut_all();
  const Decision alone = limits.consume(payment("alone", 20));
  REQUIRE(alone.degraded);
  REQUIRE(alone.allowed());
  proxy.refuse_connections(false);

  // back: the next call reports the 20, and that report's reply is lost
  FaultRule lose_report;
  lose_report.matches = [](const std::vector<std::string>& argv) {
    return argv.size() > 1 && argv[1] == limitcounter::scripts::local_report.sha1;
  };
  lose_report.fault = Fault::drop_reply;
  proxy.add_rule(lose_report);
  const long long before = script_calls(direct);
  CHECK(limits.consume(payment("back-1", 1)).allowed()); // its own call answered
  CHECK(proxy.injected(Fault::drop_reply) == 1);
  CHECK(script_calls(direct) - before == 2); // the consume and the report ran
  CHECK(used() == Usage{3, 31});

  // the report comes again with the same id: Redis knows it, nothing is added twice
  CHECK(limits.consume(payment("back-2", 1)).allowed());
  CHECK(limits.consume(payment("back-3", 1)).allowed());
  CHECK(used() == Usage{5, 33});
  CHECK(direct.command({"HLEN", limits.keys().local_reports("merchant")}).as_integer() == 1);
}

TEST_CASE_METHOD(LimitsThroughProxy,
                 "reserve, confirm, cancel, refund: each lost reply retried "
                 "applies once",
                 "[fault][lost_reply][limits]") {
  limits.set_rules(day_limit(FailurePolicy::raise));

  const Transaction held = payment("r-1", 300);
  run_with_lost_reply([&] { limits.reserve(held); });
  CHECK(record_state("r-1") == TransactionState::reserved);
  CHECK(limits.reserve(held).replayed);
  CHECK(used() == Usage{1, 300});

  run_with_lost_reply([&] { limits.confirm("r-1", 200); });
  CHECK(record_state("r-1") == TransactionState::confirmed);
  const auto confirmed = limits.confirm("r-1", 200);
  CHECK(confirmed.replayed);
  CHECK(confirmed.amount == 200);
  CHECK(used() == Usage{1, 200});

  REQUIRE(limits.reserve(payment("r-2", 100)).allowed());
  run_with_lost_reply([&] { limits.cancel("r-2"); });
  CHECK(record_state("r-2") == TransactionState::cancelled);
  const auto cancelled = limits.cancel("r-2");
  CHECK(cancelled.status == CancelResult::Status::cancelled);
  CHECK(cancelled.replayed);
  CHECK(used() == Usage{1, 200});

  run_with_lost_reply([&] { limits.refund("r-1", 50, "refund-a"); });
  const auto refund = limits.refund("r-1", 50, "refund-a");
  CHECK(refund.replayed);
  CHECK(refund.refunded_now == 50);
  CHECK(refund.refunded_total == 50);
  CHECK(used() == Usage{1, 150});

  run_with_lost_reply([&] { limits.refund("r-1"); }); // the full refund
  const auto full = limits.refund("r-1");
  CHECK(full.replayed);
  CHECK(full.refunded_now == 150);
  CHECK(used() == Usage{0, 0});
}

TEST_CASE_METHOD(LimitsThroughProxy,
                 "consume_many: a lost pipeline reply is unknown for every "
                 "item; the same batch again replays",
                 "[fault][lost_reply][limits]") {
  limits.set_rules(day_limit(FailurePolicy::deny));
  const std::vector<Transaction> batch = payments("b-", 8, 10);
  // the first reply of the pipeline is lost; the connection stays silent after it
  lose_next_reply();
  const auto first = limits.consume_many(batch);
  REQUIRE(first.size() == batch.size());
  for (const auto& result : first) {
    REQUIRE(std::holds_alternative<Error>(result));
    CHECK(std::get<Error>(result).outcome() == Outcome::unknown);
  }
  CHECK(used() == Usage{8, 80}); // every one ran
  const auto again = limits.consume_many(batch);
  for (const auto& result : again) {
    REQUIRE(std::holds_alternative<Decision>(result));
    CHECK(std::get<Decision>(result).replayed);
    CHECK(std::get<Decision>(result).allowed());
  }
  CHECK(used() == Usage{8, 80});
}

TEST_CASE_METHOD(LimitsThroughProxy,
                 "consume_many: a batch call refused until its budget ends falls to its "
                 "transactions' failure policy, the other batch call is decided by Redis",
                 "[fault][limits][batch]") {
  limits.set_rules(day_limit(FailurePolicy::allow));
  const std::vector<Transaction> batch = payments("r-", 70, 10); // batch calls of 64 and 6
  // the second batch call is answered LOADING until the call's budget ends: it never runs
  FaultRule loading;
  loading.matches = second_batch_call(batch);
  loading.fault = Fault::error_reply;
  loading.times = 100'000;
  proxy.add_rule(loading);
  const auto results = limits.consume_many(batch);
  REQUIRE(results.size() == batch.size());
  CHECK(proxy.injected(Fault::error_reply) >= 1);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    INFO("transaction " << batch[i].id);
    const auto* decision = std::get_if<Decision>(&results[i]);
    REQUIRE(decision);
    CHECK(decision->allowed());
    CHECK(decision->degraded == (i >= 64)); // not sent: decided by the failure policy
  }
  CHECK(used() == Usage{64, 640});
  CHECK(record_state(batch[63].id) == TransactionState::consumed);
  CHECK(record_state(batch[64].id) == TransactionState::none);
}

TEST_CASE_METHOD(LimitsThroughProxy,
                 "consume_many: the NOSCRIPT rerun of one batch call loses its reply: that call's "
                 "transactions are unknown, the other batch call's are decided",
                 "[fault][lost_reply][limits][batch]") {
  limits.set_rules(day_limit(FailurePolicy::allow));
  const std::vector<Transaction> batch = payments("n-", 70, 10); // batch calls of 64 and 6
  // the second batch call is answered NOSCRIPT (it did not run); its rerun runs, and its reply
  // is lost
  const limitcounter::testing::CommandMatcher second_call = second_batch_call(batch);
  proxy.add_rule({second_call, Fault::error_reply, 1, {}, "NOSCRIPT No matching script."});
  proxy.add_rule({second_call, Fault::drop_reply, 1});
  const auto first = limits.consume_many(batch);
  REQUIRE(first.size() == batch.size());
  CHECK(proxy.injected(Fault::drop_reply) == 1);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    INFO("transaction " << batch[i].id);
    if (i < 64) {
      REQUIRE(std::holds_alternative<Decision>(first[i]));
      CHECK_FALSE(std::get<Decision>(first[i]).degraded);
    } else {
      REQUIRE(std::holds_alternative<Error>(first[i]));
      CHECK(std::get<Error>(first[i]).outcome() == Outcome::unknown);
    }
  }
  CHECK(record_state(batch[64].id) == TransactionState::consumed); // the rerun ran
  CHECK(used() == Usage{70, 700});
  for (const auto& result : limits.consume_many(batch)) {
    REQUIRE(std::holds_alternative<Decision>(result));
    CHECK(std::get<Decision>(result).replayed);
  }
  CHECK(used() == Usage{70, 700});
}

TEST_CASE_METHOD(LimitsThroughProxy,
                 "refund with the original transaction past the replay horizon: a lost reply "
                 "retried applies once",
                 "[fault][lost_reply][limits][horizon]") {
  limits.set_rules(day_limit(FailurePolicy::raise));
  const Transaction paid = payment("h-1", 300);
  REQUIRE(limits.consume(paid).allowed());
  // past the replay horizon: the record is gone, the counter still counts the payment
  REQUIRE(direct.command({"DEL", limits.keys().transaction("h-1")}).as_integer() == 1);
  CHECK(used() == Usage{1, 300});

  run_with_lost_reply([&] { limits.refund(paid, 100, "late-1"); });
  CHECK(used() == Usage{1, 200}); // it ran, and recorded the transaction anew
  CHECK(record_state("h-1") == TransactionState::consumed);
  const auto retried = limits.refund(paid, 100, "late-1");
  CHECK(retried.replayed);
  CHECK(retried.refunded_now == 100);
  CHECK(used() == Usage{1, 200});
  // the id alone works again while the new record lives
  const auto rest = limits.refund("h-1");
  CHECK(rest.refunded_now == 200);
  CHECK(used() == Usage{0, 0});
}

namespace {

struct WalletThroughProxy : LostReplyFixture {
  limitcounter::WalletOptions options = [this] {
    limitcounter::WalletOptions o;
    o.key_prefix = prefix + "wal:";
    return o;
  }();
  limitcounter::Wallet wallet{through, options};

  std::int64_t balance(const std::string& user) { return wallet.account(user)->balance; }
  bool order_recorded(const std::string& user, const std::string& order) {
    return direct.command({"EXISTS", wallet.keys().order(user, order)}).as_integer() == 1;
  }
  std::int64_t journal_length(const std::string& user) {
    return direct.command({"XLEN", wallet.keys().journal(wallet.keys().partition_of(user))})
        .as_integer();
  }
};

struct PacketsThroughProxy : LostReplyFixture {
  limitcounter::RedPacketOptions options = [this] {
    limitcounter::RedPacketOptions o;
    o.key_prefix = prefix + "rp:";
    o.payout_backoff = 1ms;
    return o;
  }();
  limitcounter::RedPacketPool pool{through, options};
};

} // namespace

TEST_CASE_METHOD(WalletThroughProxy,
                 "wallet: deduct, credit, rollback and deduct_many retried after a lost reply "
                 "apply once",
                 "[fault][lost_reply][wallet]") {
  REQUIRE(wallet.load("u1", {1000, 1, 0}));

  run_with_lost_reply([&] { wallet.deduct("u1", "o1", 100); });
  CHECK(order_recorded("u1", "o1"));
  const auto deducted = wallet.deduct("u1", "o1", 100);
  CHECK(deducted.replayed);
  CHECK(deducted.balance == 900);

  run_with_lost_reply([&] { wallet.credit("u1", "o2", 50); });
  CHECK(wallet.credit("u1", "o2", 50).replayed);
  CHECK(balance("u1") == 950);

  run_with_lost_reply([&] { wallet.rollback("u1", "o1"); });
  const auto rolled_back = wallet.rollback("u1", "o1");
  CHECK(rolled_back.status == limitcounter::RollbackResult::Status::rolled_back);
  CHECK(rolled_back.replayed);
  CHECK(balance("u1") == 1050);

  const std::vector<limitcounter::WalletOrder> batch{
      {"u1", "b1", 10}, {"u1", "b2", 20}, {"u1", "b3", 30}, {"u1", "b4", 40}};
  lose_next_reply();
  const Error lost = error_of([&] { wallet.deduct_many(batch); });
  CHECK(lost.outcome() == Outcome::unknown);
  CHECK(order_recorded("u1", "b4")); // the whole pipeline ran
  for (const auto& result : wallet.deduct_many(batch)) {
    REQUIRE(std::holds_alternative<limitcounter::WalletResult>(result));
    CHECK(std::get<limitcounter::WalletResult>(result).replayed);
  }
  CHECK(balance("u1") == 950);
  // one journal event per change: deduct, credit, rollback and the four of the batch
  CHECK(journal_length("u1") == 7);
}

TEST_CASE_METHOD(PacketsThroughProxy,
                 "red packets: create, grab, close, ack and fail retried after a lost reply "
                 "apply once",
                 "[fault][lost_reply][red_packet]") {
  const std::vector<std::int64_t> amounts{30, 20, 50};
  limitcounter::PacketOptions packet_options;
  packet_options.expires_at = limitcounter::Clock::now() + 1h;
  const std::string list = pool.keys().packet("p1", "list");

  // create: begin and one chunk; the reply of the chunk is lost
  FaultRule second;
  second.matches = script_call_with_key_prefix(prefix);
  second.fault = Fault::forward;
  proxy.add_rule(second); // the begin goes through
  run_with_lost_reply([&] { pool.create("p1", amounts, packet_options); }, 2);
  CHECK(direct.command({"LLEN", list}).as_integer() == 3);
  const auto created = pool.create("p1", amounts, packet_options);
  CHECK(created.replayed);
  CHECK(direct.command({"LLEN", list}).as_integer() == 3); // no chunk twice

  run_with_lost_reply([&] { pool.grab("p1", "alice"); });
  const auto again = pool.grab("p1", "alice");
  CHECK(again.status == limitcounter::GrabResult::Status::granted);
  CHECK(again.replayed);
  CHECK(direct.command({"LLEN", list}).as_integer() == 2); // one packet popped, once
  REQUIRE(pool.grab("p1", "bob").status == limitcounter::GrabResult::Status::granted);

  run_with_lost_reply([&] { pool.close("p1"); });
  const auto closed = pool.close("p1");
  CHECK(closed.replayed);
  CHECK(closed.packets_left == 1);
  CHECK(closed.leftover == 100 - again.amount - pool.grab("p1", "bob").amount);

  const std::uint32_t partition = pool.keys().partition_of("p1");
  auto tasks = pool.take_payouts(partition, 10);
  REQUIRE(tasks.size() == 2);
  run_with_lost_reply([&] { pool.ack_payout(tasks[0]); });
  CHECK(pool.ack_payout(tasks[0])); // the same lease: recorded as paid

  run_with_lost_reply([&] { pool.fail_payout(tasks[1]); });
  CHECK_FALSE(pool.fail_payout(tasks[1])); // counted once, not dead-lettered
  const auto retried = pool.take_payouts(partition, 10, limitcounter::Clock::now() + 1s);
  REQUIRE(retried.size() == 1);
  CHECK(retried[0].user_id == tasks[1].user_id);
  CHECK(retried[0].attempt == 2); // one failed attempt, not two
}

// An operator's requeue of a dead payout whose reply was lost: the retry must not move the
// task twice (a second queue entry is a second payment attempt) and must say it was requeued.
TEST_CASE_METHOD(PacketsThroughProxy,
                 "red packets: a requeue of a dead payout retried after a lost reply moves it "
                 "once and answers requeued, replayed",
                 "[fault][lost_reply][red_packet]") {
  limitcounter::PacketOptions packet_options;
  packet_options.expires_at = limitcounter::Clock::now() + 1h;
  pool.create("rq", {70}, packet_options);
  REQUIRE(pool.grab("rq", "alice").status == limitcounter::GrabResult::Status::granted);
  const std::uint32_t partition = pool.keys().partition_of("rq");
  const auto now = limitcounter::Clock::now();
  bool dead = false;
  for (int attempt = 1; !dead && attempt <= options.max_payout_attempts; ++attempt) {
    const auto tasks = pool.take_payouts(partition, 10, now + attempt * 1s);
    REQUIRE(tasks.size() == 1);
    dead = pool.fail_payout(tasks[0], now + attempt * 1s);
  }
  REQUIRE(dead);
  const std::string dead_list = pool.keys().payout(partition, "dead");
  const std::string ready = pool.keys().payout(partition, "ready");
  REQUIRE(direct.command({"LLEN", dead_list}).as_integer() == 1);

  const auto later = now + 10s;
  run_with_lost_reply([&] { pool.requeue_payout("rq", "alice", later); });
  CHECK(direct.command({"LLEN", dead_list}).as_integer() == 0); // it ran: moved
  CHECK(direct.command({"ZCARD", ready}).as_integer() == 1);

  const long long before = script_calls(direct);
  const auto requeued = pool.requeue_payout("rq", "alice", later);
  CHECK(requeued.status == limitcounter::RequeueResult::Status::requeued);
  CHECK(requeued.replayed);
  CHECK(script_calls(direct) - before == 1);
  CHECK(direct.command({"LLEN", dead_list}).as_integer() == 0);
  CHECK(direct.command({"ZCARD", ready}).as_integer() == 1); // queued once
  const auto retaken = pool.take_payouts(partition, 10, later);
  REQUIRE(retaken.size() == 1);
  CHECK(retaken[0].attempt == 1); // attempts reset once
  CHECK(retaken[0].amount == 70);
}

// A create whose reply was lost, retried after the packet's expiry (a short packet, a slow
// retry): the retry must not be told "expires in the past" as if nothing had been created, or
// the host refunds the sender while the packet's leftover is refunded by close too.
TEST_CASE_METHOD(PacketsThroughProxy,
                 "red packets: a create whose reply was lost, retried after its expiry, replays "
                 "and finishes the packet",
                 "[fault][lost_reply][red_packet]") {
  limitcounter::PacketOptions packet_options;
  packet_options.expires_at = limitcounter::Clock::now() + 500ms;
  const std::vector<std::int64_t> amounts{30, 20, 50};
  const std::string meta = pool.keys().packet("late", "meta");
  // the begin runs and its reply is lost: the chunk is never sent
  run_with_lost_reply([&] { pool.create("late", amounts, packet_options); });
  CHECK(direct.command({"HGET", meta, "ready"}).as_string() == "0");

  std::this_thread::sleep_for(700ms); // past expires_at
  const auto retried = pool.create("late", amounts, packet_options);
  CHECK(retried.replayed);
  CHECK(retried.created_now); // the missing chunk is stored now
  CHECK(direct.command({"HGET", meta, "ready"}).as_string() == "1");
  CHECK(pool.grab("late", "alice").status == limitcounter::GrabResult::Status::expired);
  const auto closed = pool.close("late");
  CHECK(closed.leftover == 100); // the sender gets it back once, here
  CHECK(closed.packets_left == 3);

  // a new packet that would expire at once is refused, and nothing is written
  packet_options.expires_at = limitcounter::Clock::now() - 1ms;
  const Error past = error_of([&] { pool.create("never", amounts, packet_options); });
  CHECK(past.code() == errc::invalid_argument);
  CHECK(past.outcome() == Outcome::failed);
  CHECK_THAT(past.what(), Catch::Contains("never") && Catch::Contains("in the past"));
  CHECK(direct.command({"EXISTS", pool.keys().packet("never", "meta")}).as_integer() == 0);
}

TEST_CASE_METHOD(LostReplyFixture,
                 "consumes merged into one script call: its reply lost, each caller gets "
                 "unknown and its retry replays once",
                 "[fault][lost_reply][limits][coalesce]") {
  const RedisOptions slow = through_proxy(2s); // longer than the first call's delayed reply
  LimitCounterOptions options;
  options.key_prefix = prefix;
  options.consume_in_flight = 1; // a consume that comes while one is in flight is queued
  LimitCounter limits(Redis(slow), limitcounter::Calendar("UTC"), options);
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_amount(1000)));
  const auto payment = [](const std::string& id) {
    return Transaction{id, {{"merchant", "m1"}}, 10};
  };

  // The first consume's reply is held back for 1 s; the consumes that come meanwhile queue and
  // go together in the next script call, whose reply is lost.
  FaultRule hold_first;
  hold_first.matches = script_call_with_key_prefix(prefix);
  hold_first.fault = Fault::delay_reply;
  hold_first.delay = 1s;
  proxy.add_rule(hold_first);
  lose_next_reply();

  const long long before = script_calls(direct);
  std::optional<Error> first_error;
  std::thread first([&] {
    try {
      limits.consume(payment("merged-0"));
    } catch (const Error& e) {
      first_error = e;
    }
  });
  while (script_calls(direct) == before) { // it ran; its reply is held
    std::this_thread::yield();
  }
  constexpr int queued = 8;
  std::vector<std::optional<Error>> errors(queued);
  std::vector<std::thread> callers;
  for (int i = 0; i < queued; ++i) {
    callers.emplace_back([&, i] {
      try {
        limits.consume(payment("merged-" + std::to_string(i + 1)));
      } catch (const Error& e) {
        errors[i] = e;
      }
    });
  }
  first.join();
  for (auto& caller : callers) {
    caller.join();
  }
  // The server ran two script calls for the nine consumes: the first alone, then the eight
  // queued ones together, and every one of the nine is recorded.
  CHECK_FALSE(first_error);
  CHECK(script_calls(direct) - before == 2);
  CHECK(proxy.injected(Fault::drop_reply) == 1);
  LimitCounter reader(direct, limitcounter::Calendar("UTC"), options);
  for (int i = 0; i <= queued; ++i) {
    const auto record = reader.transaction_record("merged-" + std::to_string(i));
    CHECK((record && record->state == TransactionState::consumed));
  }
  for (int i = 0; i < queued; ++i) {
    INFO("merged-" << i + 1);
    REQUIRE(errors[i]);
    CHECK(errors[i]->outcome() == Outcome::unknown);
    CHECK(errors[i]->code() == errc::timeout);
  }

  // The careful host retries each with the same id: a replay of what Redis decided, nothing
  // counted twice.
  for (int i = 1; i <= queued; ++i) {
    const Decision retry = limits.consume(payment("merged-" + std::to_string(i)));
    CHECK(retry.replayed);
    CHECK(retry.allowed());
  }
  CHECK(reader.usage("merchant", Dimension{"m1"}, Period::day) == Usage{queued + 1, 90});
}
