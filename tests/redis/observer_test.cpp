#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include <limitcounter/journal_consumer.hpp>
#include <limitcounter/limit_counter.hpp>
#include <limitcounter/prometheus.hpp>
#include <limitcounter/red_packet.hpp>
#include <limitcounter/wallet.hpp>

// The example's server: the test scrapes what a Prometheus server would.
#include "../../examples/metrics_http.hpp"
#include "support/outcome.hpp"
#include "support/redis_server.hpp"
#include "support/topology.hpp"

using namespace std::chrono_literals;
using limitcounter::AccountSnapshot;
using limitcounter::CapRequest;
using limitcounter::Clock;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::JournalConsumer;
using limitcounter::JournalConsumerOptions;
using limitcounter::JournalEvent;
using limitcounter::JournalLag;
using limitcounter::LimitCounter;
using limitcounter::LimitCounterOptions;
using limitcounter::Period;
using limitcounter::PrometheusObserver;
using limitcounter::Redis;
using limitcounter::RedPacketOptions;
using limitcounter::RedPacketPool;
using limitcounter::Rule;
using limitcounter::RuleSet;
using limitcounter::Transaction;
using limitcounter::Wallet;
using limitcounter::WalletOptions;
using limitcounter::WalletOrder;
using limitcounter::WalletResult;
using limitcounter::testing::outcome;
using limitcounter::testing::test_options;
using limitcounter::testing::unique_prefix;

namespace {

WalletOptions wallet_options(const std::shared_ptr<PrometheusObserver>& metrics) {
  WalletOptions o;
  o.key_prefix = unique_prefix() + "obs-wallet:";
  o.partitions = 2;
  o.observer = metrics;
  return o;
}

RedPacketOptions packet_options(const std::shared_ptr<PrometheusObserver>& metrics) {
  RedPacketOptions o;
  o.key_prefix = unique_prefix() + "obs-rp:";
  o.partitions = 2;
  o.max_payout_attempts = 2;
  o.payout_backoff = 1ms;
  o.observer = metrics;
  return o;
}

struct ObserverFixture {
  std::shared_ptr<PrometheusObserver> metrics = std::make_shared<PrometheusObserver>();
  Redis redis{test_options()};
  LimitCounter limits{redis, limitcounter::Calendar("Asia/Shanghai"), options()};

  LimitCounterOptions options() const {
    LimitCounterOptions o;
    o.key_prefix = unique_prefix() + "obs:";
    o.observer = metrics;
    return o;
  }

  bool has(const std::string& line) const {
    return metrics->render().find("\n" + line + "\n") != std::string::npos;
  }
};

Transaction payment(const std::string& id) { return Transaction{id, {{"merchant", "m1"}}, 100}; }

} // namespace

TEST_CASE_METHOD(ObserverFixture, "PrometheusObserver counts real decisions, caps and hits",
                 "[observer][redis]") {
  limits.set_rules(
      RuleSet().add(Rule("merchant-day").where("merchant").per(Period::day).max_count(2)));
  CHECK(limits.consume(payment("tx-1")).allowed());
  CHECK(limits.consume(payment("tx-2")).allowed()); // 2 of 2: near the limit
  CHECK_FALSE(limits.consume(payment("tx-3")).allowed());
  CHECK(limits.consume(payment("tx-3")).replayed); // a retry: the first decision again
  CHECK_FALSE(limits.check(payment("tx-4")).allowed());
  CHECK_FALSE(limits.reserve(payment("tx-5")).allowed());

  CHECK(limits.take_daily_cap("sms", "acct-1", 1).allowed());
  CHECK_FALSE(limits.take_daily_cap("sms", "acct-1", 1).allowed());
  const auto batch = limits.take_daily_cap_many({CapRequest{"sms", "acct-2", 1}, //
                                                 CapRequest{"sms", "acct-2", 1}});
  REQUIRE(batch.size() == 2);
  CHECK(limits.hit_sliding_window("login", "acct-1", 1, 60s).allowed());
  CHECK_FALSE(limits.hit_sliding_window("login", "acct-1", 1, 60s).allowed());
  CHECK_THROWS_MATCHES(
      limits.take_daily_cap("sms", "bad subject", 1), Error,
      Catch::Predicate<Error>([](const Error& e) { return e.code() == errc::invalid_argument; }));

  // tx-1 is consumed: refunded (and again: a replay); tx-never is unknown.
  CHECK(limits.refund("tx-1", 100, "r-1").refunded_now == 100);
  CHECK(limits.refund("tx-1", 100, "r-1").replayed);
  CHECK_THROWS_AS(limits.confirm("tx-never"), Error);
  CHECK(outcome(limits.cancel("tx-never")) ==
        std::pair(limitcounter::CancelResult::Status::recorded_unknown, false));
  // its record reads as cancelled now: a retry is a replayed cancel
  CHECK(outcome(limits.cancel("tx-never")) ==
        std::pair(limitcounter::CancelResult::Status::cancelled, true));

  CHECK(has(R"(limitcounter_decisions_total{op="check",verdict="denied",rule="merchant-day"} 1)"));
  CHECK(has(R"(limitcounter_decisions_total{op="consume",verdict="allowed",rule=""} 2)"));
  CHECK(
      has(R"(limitcounter_decisions_total{op="consume",verdict="denied",rule="merchant-day"} 2)"));
  CHECK(
      has(R"(limitcounter_decisions_total{op="reserve",verdict="denied",rule="merchant-day"} 1)"));
  CHECK(has(R"(limitcounter_decision_seconds_count{op="consume"} 4)"));
  CHECK(has(R"(limitcounter_decision_seconds_count{op="reserve"} 1)"));
  CHECK(has(R"(limitcounter_decision_seconds_count{op="check"} 1)"));
  CHECK(has(R"(limitcounter_transitions_total{op="refund",status="refunded"} 1)"));
  CHECK(has(R"(limitcounter_transitions_total{op="refund",status="replayed"} 1)"));
  CHECK(has(R"(limitcounter_transitions_total{op="confirm",status="error"} 1)"));
  CHECK(has(R"(limitcounter_transitions_total{op="cancel",status="recorded_unknown"} 1)"));
  CHECK(has(R"(limitcounter_transitions_total{op="cancel",status="replayed"} 1)"));
  CHECK(has(R"(limitcounter_transition_seconds_count{op="refund"} 2)"));
  CHECK(has(R"(limitcounter_errors_total{code="not_found",outcome="failed"} 1)"));
  CHECK(has("limitcounter_replayed_total 1"));
  CHECK(has("limitcounter_degraded_total 0"));
  CHECK(has(R"(limitcounter_near_limit_total{rule="merchant-day"} 1)"));
  CHECK(has(
      R"(limitcounter_limiter_decisions_total{kind="daily_cap",name="sms",verdict="allowed"} 2)"));
  CHECK(has(
      R"(limitcounter_limiter_decisions_total{kind="daily_cap",name="sms",verdict="refused"} 2)"));
  CHECK(has(
      R"(limitcounter_limiter_decisions_total{kind="sliding_window",name="login",verdict="allowed"} 1)"));
  CHECK(has(
      R"(limitcounter_limiter_decisions_total{kind="sliding_window",name="login",verdict="refused"} 1)"));
  CHECK(has(R"(limitcounter_limiter_decision_seconds_count{kind="daily_cap"} 4)"));
  CHECK(has(R"(limitcounter_limiter_decision_seconds_count{kind="sliding_window"} 2)"));
  // The bad subject was refused before anything was sent, and is not a label.
  CHECK(has(R"(limitcounter_errors_total{code="invalid_argument",outcome="not_sent"} 1)"));
  CHECK(metrics->render().find("acct-") == std::string::npos);
}

TEST_CASE_METHOD(ObserverFixture, "GET /metrics over HTTP serves what render() gives",
                 "[observer][redis]") {
  limits.hit_sliding_window("login", "acct-1", 5, 60s);
  const example::MetricsHttpServer server([this] { return metrics->render(); }, 0);

  const std::string scrape = example::http_get(server.port(), "/metrics");
  const auto body_at = scrape.find("\r\n\r\n");
  REQUIRE(body_at != std::string::npos);
  CHECK(scrape.rfind("HTTP/1.0 200 OK\r\n", 0) == 0);
  CHECK_THAT(scrape.substr(0, body_at),
             Catch::Contains("Content-Type: text/plain; version=0.0.4; charset=utf-8"));
  CHECK(scrape.substr(body_at + 4) == metrics->render());
  CHECK_THAT(scrape,
             Catch::Contains(R"(limitcounter_limiter_decisions_total{kind="sliding_window",)"
                             R"(name="login",verdict="allowed"} 1)"));
  CHECK(example::http_get(server.port(), "/").rfind("HTTP/1.0 404 Not Found\r\n", 0) == 0);
}

TEST_CASE_METHOD(ObserverFixture, "a wallet reports each operation by status, and its errors",
                 "[observer][redis][wallet]") {
  Wallet wallet(redis, wallet_options(metrics));
  REQUIRE(wallet.load("alice", AccountSnapshot{100, 1, 0}));
  CHECK(wallet.deduct("alice", "o-1", 60).status == WalletResult::Status::ok);
  CHECK(wallet.deduct("alice", "o-1", 60).replayed); // a retry: nothing moved
  CHECK(wallet.deduct("alice", "o-2", 60).status == WalletResult::Status::insufficient);
  CHECK(wallet.deduct("bob", "o-3", 1).status == WalletResult::Status::not_loaded);
  CHECK(wallet.credit("alice", "c-1", 10).status == WalletResult::Status::ok);
  CHECK(outcome(wallet.rollback("alice", "o-1")) ==
        std::pair(limitcounter::RollbackResult::Status::rolled_back, false));
  CHECK(outcome(wallet.rollback("alice", "o-1")) ==
        std::pair(limitcounter::RollbackResult::Status::rolled_back, true));
  CHECK(wallet.freeze("alice", "fraud check"));
  CHECK_FALSE(wallet.freeze("alice", "fraud check"));
  CHECK(wallet.deduct("alice", "o-4", 1).status == WalletResult::Status::frozen);
  CHECK(wallet.unfreeze("alice", "cleared"));
  const auto batch = wallet.deduct_many(
      {WalletOrder{"alice", "o-5", 1, Clock::now()}, WalletOrder{"alice", "o-1", 1, Clock::now()}});
  REQUIRE(batch.size() == 2);
  CHECK(std::holds_alternative<Error>(batch[1])); // o-1 was rolled back: a conflict
  // A conflict thrown by a single call: counted as "error" and by its code.
  CHECK_THROWS_AS(wallet.credit("alice", "o-1", 5), Error);

  CHECK(has(R"(limitcounter_wallet_operations_total{op="deduct",status="ok"} 1)"));
  CHECK(has(R"(limitcounter_wallet_operations_total{op="deduct",status="replayed"} 1)"));
  CHECK(has(R"(limitcounter_wallet_operations_total{op="deduct",status="insufficient"} 1)"));
  CHECK(has(R"(limitcounter_wallet_operations_total{op="deduct",status="not_loaded"} 1)"));
  CHECK(has(R"(limitcounter_wallet_operations_total{op="deduct",status="frozen"} 1)"));
  CHECK(has(R"(limitcounter_wallet_operations_total{op="credit",status="ok"} 1)"));
  CHECK(has(R"(limitcounter_wallet_operations_total{op="credit",status="error"} 1)"));
  CHECK(has(R"(limitcounter_wallet_operations_total{op="rollback",status="rolled_back"} 1)"));
  CHECK(has(R"(limitcounter_wallet_operations_total{op="rollback",status="replayed"} 1)"));
  CHECK(has(R"(limitcounter_wallet_operations_total{op="freeze",status="changed"} 1)"));
  CHECK(has(R"(limitcounter_wallet_operations_total{op="freeze",status="unchanged"} 1)"));
  CHECK(has(R"(limitcounter_wallet_operations_total{op="unfreeze",status="changed"} 1)"));
  CHECK(has(R"(limitcounter_wallet_operations_total{op="deduct_many",status="ok"} 1)"));
  CHECK(has(R"(limitcounter_wallet_operations_total{op="deduct_many",status="error"} 1)"));
  CHECK(has(R"(limitcounter_wallet_operation_seconds_count{op="deduct"} 5)"));
  CHECK(has(R"(limitcounter_errors_total{code="conflict",outcome="failed"} 2)"));
  // Users and orders are never labels.
  const std::string text = metrics->render();
  CHECK(text.find("alice") == std::string::npos);
  CHECK(text.find("o-1") == std::string::npos);
}

TEST_CASE_METHOD(ObserverFixture,
                 "red packets report creates, grabs (an empty packet too), closes and payouts "
                 "failed until dead-lettered",
                 "[observer][redis][redpacket]") {
  RedPacketPool pool(redis, packet_options(metrics));
  const limitcounter::PacketOptions rules; // the same expiry for the create and its retry
  CHECK(pool.create("pk-1", {30, 70}, rules).created_now);
  CHECK(pool.create("pk-1", {30, 70}, rules).replayed);
  CHECK(outcome(pool.grab("pk-1", "u1")) ==
        std::pair(limitcounter::GrabResult::Status::granted, false));
  CHECK(outcome(pool.grab("pk-1", "u1")) ==
        std::pair(limitcounter::GrabResult::Status::granted, true));
  const auto batch = pool.grab_many("pk-1", {"u2", "u3"});
  REQUIRE(batch.size() == 2);
  // The packet is empty now: u3's grab of it is sold_out.
  CHECK(std::get<limitcounter::GrabResult>(batch[1]).status ==
        limitcounter::GrabResult::Status::sold_out);
  CHECK(pool.grab("pk-1", "u4").status == limitcounter::GrabResult::Status::sold_out);
  CHECK_THROWS_AS(pool.grab("pk-unknown", "u1"), Error);
  CHECK(pool.close("pk-1").closed_now);
  CHECK(pool.close("pk-1").replayed);

  // Two payouts: one paid, one failed twice, so dead-lettered (max_payout_attempts 2).
  const std::uint32_t partition = pool.keys().partition_of("pk-1");
  auto now = Clock::now();
  auto tasks = pool.take_payouts(partition, 10, now);
  REQUIRE(tasks.size() == 2);
  CHECK(pool.ack_payout(tasks[0], now));
  CHECK_FALSE(pool.fail_payout(tasks[1], now));
  now += 1s; // past the back-off
  tasks = pool.take_payouts(partition, 10, now);
  REQUIRE(tasks.size() == 1);
  CHECK(pool.fail_payout(tasks[0], now));
  CHECK(pool.take_payouts(partition, 10, now + 1s).empty());
  REQUIRE(pool.dead_payouts(partition).size() == 1);

  CHECK(has(R"(limitcounter_red_packet_operations_total{op="create",status="created"} 1)"));
  CHECK(has(R"(limitcounter_red_packet_operations_total{op="create",status="replayed"} 1)"));
  CHECK(has(R"(limitcounter_red_packet_operations_total{op="grab",status="granted"} 1)"));
  CHECK(has(R"(limitcounter_red_packet_operations_total{op="grab",status="replayed"} 1)"));
  CHECK(has(R"(limitcounter_red_packet_operations_total{op="grab",status="sold_out"} 1)"));
  CHECK(has(R"(limitcounter_red_packet_operations_total{op="grab",status="error"} 1)"));
  CHECK(has(R"(limitcounter_red_packet_operations_total{op="grab_many",status="granted"} 1)"));
  CHECK(has(R"(limitcounter_red_packet_operations_total{op="grab_many",status="sold_out"} 1)"));
  CHECK(has(R"(limitcounter_red_packet_operations_total{op="close",status="closed"} 1)"));
  CHECK(has(R"(limitcounter_red_packet_operations_total{op="close",status="replayed"} 1)"));
  CHECK(has(R"(limitcounter_red_packet_operation_seconds_count{op="grab"} 4)"));
  CHECK(has(R"(limitcounter_errors_total{code="not_found",outcome="failed"} 1)"));
  CHECK(has(R"(limitcounter_payout_operations_total{op="take",status="ok"} 3)"));
  CHECK(has(R"(limitcounter_payout_operations_total{op="ack",status="paid"} 1)"));
  CHECK(has(R"(limitcounter_payout_operations_total{op="fail",status="retry"} 1)"));
  CHECK(has(R"(limitcounter_payout_operations_total{op="fail",status="dead_lettered"} 1)"));
  CHECK(has("limitcounter_payout_tasks_taken_total 3"));
  CHECK(has(R"(limitcounter_payout_operation_seconds_count{op="fail"} 2)"));
  const std::string text = metrics->render();
  CHECK(text.find("pk-1") == std::string::npos);
  CHECK(text.find("u1") == std::string::npos);
}

TEST_CASE_METHOD(ObserverFixture,
                 "the journal's lag per partition equals the events not yet read, pending those "
                 "read and not acknowledged",
                 "[observer][redis][wallet][journal]") {
  WalletOptions options = wallet_options(nullptr);
  Wallet wallet(redis, options);
  JournalConsumerOptions consumer_options;
  consumer_options.batch = 2;
  consumer_options.observer = metrics;
  JournalConsumer consumer(redis, options, consumer_options);
  const std::uint32_t partition = wallet.keys().partition_of("alice");
  const std::uint32_t other = 1 - partition;

  // Nothing written yet: no stream, nothing to do.
  CHECK(consumer.lag(partition).unread == 0);

  REQUIRE(wallet.load("alice", AccountSnapshot{1000, 1, 0}));
  for (int i = 0; i < 5; ++i) {
    REQUIRE(wallet.deduct("alice", "o-" + std::to_string(i), 10).status ==
            WalletResult::Status::ok);
  }
  // The group does not exist yet: every event of the stream is unread.
  JournalLag lag = consumer.lag(partition);
  CHECK(lag.group == "persister");
  CHECK(lag.partition == partition);
  CHECK(lag.unread == 5);
  CHECK(lag.pending == 0);
  CHECK(has(R"(limitcounter_journal_lag_entries{group="persister",partition=")" +
            std::to_string(partition) + R"("} 5)"));

  // Read 2 without acknowledging: 3 unread, 2 pending; acknowledged: 3 unread, 0 pending.
  const std::vector<JournalEvent> first = consumer.read(partition);
  REQUIRE(first.size() == 2);
  lag = consumer.lag(partition);
  CHECK(lag.unread == 3);
  CHECK(lag.pending == 2);
  consumer.acknowledge(partition, first); // trims the stream: Redis's count still holds
  lag = consumer.lag(partition);
  CHECK(lag.unread == 3);
  CHECK(lag.pending == 0);

  // A poll hands out a batch (2 events) and then reports every partition's lag.
  std::vector<JournalEvent> persisted;
  consumer.poll([&](const std::vector<JournalEvent>& events) {
    persisted.insert(persisted.end(), events.begin(), events.end());
  });
  CHECK(persisted.size() == 2);
  const std::string lag_line = R"(limitcounter_journal_lag_entries{group="persister",partition=")" +
                               std::to_string(partition) + R"("} )";
  CHECK(has(lag_line + "1"));
  CHECK(has(R"(limitcounter_journal_lag_entries{group="persister",partition=")" +
            std::to_string(other) + R"("} 0)"));
  CHECK(has(R"(limitcounter_journal_pending_entries{group="persister",partition=")" +
            std::to_string(partition) + R"("} 0)"));
  const std::vector<JournalLag> all = consumer.lag();
  REQUIRE(all.size() == 2);
  CHECK(all[partition].unread == 1);
  CHECK(all[other].unread == 0);

  consumer.acknowledge(partition, consumer.read(partition));
  CHECK(consumer.lag(partition).unread == 0);
  CHECK(has(lag_line + "0"));
  // An operator deletes an unread entry between two others: Redis can no longer count
  // (deleting the first unread one leaves it countable), and says so.
  for (const char* order : {"o-5", "o-6", "o-7"}) {
    REQUIRE(wallet.deduct("alice", order, 10).status == WalletResult::Status::ok);
  }
  const limitcounter::Reply unread =
      redis.command({"XRANGE", wallet.keys().journal(partition), "-", "+", "COUNT", "2"});
  REQUIRE(unread.as_array().size() == 2);
  REQUIRE(redis.command({"XDEL", wallet.keys().journal(partition), unread.at(1).at(0).as_string()})
              .as_integer() == 1);
  CHECK_FALSE(consumer.lag(partition).unread.has_value());
  CHECK(has(lag_line + "NaN"));

  CHECK_THROWS_MATCHES(consumer.lag(2), Error, Catch::Predicate<Error>([](const Error& e) {
                         return e.code() == errc::invalid_argument;
                       }));
}
