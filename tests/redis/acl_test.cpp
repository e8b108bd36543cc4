#include <catch2/catch.hpp>

#include <atomic>
#include <sstream>
#include <thread>
#include <vector>

#include <limitcounter/acl.hpp>
#include <limitcounter/limitcounter.hpp>

#include "support/outcome.hpp"
#include "support/probe.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"
#include "support/topology.hpp"

using namespace std::chrono_literals;
using limitcounter::PacketState;
using limitcounter::Redis;
using limitcounter::RedisOptions;
using limitcounter::testing::outcome;
using limitcounter::testing::RedisServer;
using limitcounter::testing::test_options;
using limitcounter::testing::unique_prefix;

namespace {

// Every node of this run's topology (one server, or each node of the cluster).
std::vector<RedisOptions> node_options() {
  if (!limitcounter::testing::on_cluster()) {
    return {limitcounter::testing::shared_server().options()};
  }
  std::vector<RedisOptions> nodes;
  for (const RedisServer* node : limitcounter::testing::shared_cluster().nodes()) {
    nodes.push_back(node->options());
  }
  return nodes;
}

// TIME commands the server has run (INFO commandstats).
long long time_calls(Redis& redis) { return limitcounter::testing::command_calls(redis, "time"); }

} // namespace

TEST_CASE("every job works under the least-privilege ACL, and nothing more is allowed",
          "[redis][acl]") {
  // On a cluster every node checks the user itself: the user is set on each, and the router
  // needs CLUSTER SLOTS and ASKING (missing before: the first call failed with NOPERM).
  const std::string prefix = unique_prefix() + "acl:";
  std::vector<std::string> setuser{"ACL", "SETUSER", "limitcounter", "on", ">lc-secret-pw"};
  std::istringstream rules(
      limitcounter::least_privilege_acl({prefix + "limit:", prefix + "wallet:", prefix + "rp:"}));
  for (std::string rule; rules >> rule;) {
    setuser.push_back(rule);
  }
  for (const RedisOptions& node : node_options()) {
    Redis admin(node);
    REQUIRE(admin.command(setuser).as_string() == "OK");
    admin.command({"SCRIPT", "FLUSH"}); // the user must be able to load the scripts itself
  }

  RedisOptions options = test_options();
  options.user = "limitcounter";
  options.password = "lc-secret-pw";
  Redis redis(options);

  limitcounter::LimitCounterOptions limit_options;
  limit_options.key_prefix = prefix + "limit:";
  limitcounter::LimitCounter limits(redis, limitcounter::Calendar("Asia/Shanghai"), limit_options);
  limits.set_rules(limitcounter::RuleSet().add(
      limitcounter::Rule("day").where("merchant").per(limitcounter::Period::day).max_amount(1000)));
  limitcounter::Transaction tx{"acl-1", {{"merchant", "m1"}}, 100};
  CHECK(limits.consume(tx).allowed());
  CHECK(limits.reserve({"acl-2", {{"merchant", "m1"}}, 100}).allowed());
  CHECK(limits.confirm("acl-2", 50).released == 50);
  CHECK(limits.refund("acl-1").refunded_now == 100);
  CHECK(limits.take_daily_cap("sms", "a1", 5).allowed());
  CHECK(limits.hit_sliding_window("pay", "m1", 5, 1s).allowed());
  CHECK(limits.usage("merchant", limitcounter::Dimension{"m1"}, limitcounter::Period::day).amount ==
        50);
  // Listing (HSCAN) and a cap read (HGET) need nothing beyond the ACL either.
  CHECK(limits.dimensions("merchant", limitcounter::Period::day).dimensions.size() == 1);
  CHECK(limits.cap_usage("sms", "a1").used == 1);
  // The operator calls (limitctl): a transaction's record and an audited correction.
  CHECK(limits.transaction_record("acl-1")->refunded == 100);
  CHECK(limits
            .adjust("merchant", limitcounter::Dimension{"m1"}, limitcounter::Period::day,
                    {"acl-fix", 0, 10, "ops", "acl test"})
            .after.amount == 60);

  limitcounter::WalletOptions wallet_options;
  wallet_options.key_prefix = prefix + "wallet:";
  limitcounter::Wallet wallet(redis, wallet_options);
  CHECK(wallet.load("u1", {1000, 1, 0}));
  CHECK(wallet.deduct("u1", "o1", 10).status == limitcounter::WalletResult::Status::ok);
  CHECK(outcome(wallet.rollback("u1", "o1")) ==
        std::pair(limitcounter::RollbackResult::Status::rolled_back, false));
  limitcounter::JournalConsumer consumer(redis, wallet_options);
  CHECK(consumer.poll([](const auto&) {}) == 2);
  CHECK(wallet.account("u1")->balance == 1000);

  limitcounter::RedPacketOptions packet_options;
  packet_options.key_prefix = prefix + "rp:";
  limitcounter::RedPacketPool pool(redis, packet_options);
  pool.create("p1", {5, 5});
  CHECK(pool.grab("p1", "u1").status == limitcounter::GrabResult::Status::granted);
  CHECK(pool.run_payouts([](const limitcounter::PayoutTask&) { return true; }) == 1);
  CHECK(pool.close("p1").leftover == 5);
  CHECK(pool.status("p1")->state == PacketState::closed);
  CHECK(outcome(pool.requeue_payout("p1", "u1")) ==
        std::pair(limitcounter::RequeueResult::Status::not_dead, false));

  // The cluster sweep (SCAN on every master; the home record's HGETALL in lua/transaction_home.lua)
  // needs nothing beyond it either: a refund of a transaction spread over two slots leaves its
  // home record open for the sweep (on standalone Redis the sweep has nothing to do).
  limits.set_rules(limitcounter::RuleSet()
                       .add(limitcounter::Rule("day")
                                .where("merchant")
                                .per(limitcounter::Period::day)
                                .max_amount(1000))
                       .add(limitcounter::Rule("dept-day")
                                .where("dept")
                                .per(limitcounter::Period::day)
                                .max_count(100)));
  REQUIRE(limits.consume({"acl-3", {{"merchant", "m1"}, {"dept", "d1"}}, 10}).allowed());
  REQUIRE(limits.refund("acl-3").refunded_now == 10);
  CHECK_NOTHROW(limits.finish_interrupted(0s));

  // nothing beyond: other commands and other keys are refused
  CHECK(redis.command({"FLUSHALL"}).is_error());
  CHECK(redis.command({"KEYS", "*"}).is_error());
  CHECK(redis.command({"HGET", "other:key", "f"}).is_error());
}

TEST_CASE("the server clock follows Redis TIME without a round trip per call",
          "[redis][clock][standalone]") {
  RedisServer server;
  Redis redis(server.options());
  limitcounter::ServerClock clock(redis, 1h);
  const auto before = limitcounter::Clock::now();
  const auto now = clock.now();
  // the same machine: the offset is the measurement error, far below a second
  CHECK(std::chrono::abs(clock.offset()) < 1s);
  CHECK(std::chrono::abs(now - before) < 1s);
  const auto calls = [&] { return time_calls(redis); };
  const long long sampled = calls();
  for (int i = 0; i < 100; ++i) {
    clock.now();
  }
  CHECK(calls() == sampled); // sampled, not per call
  server.stop();
  CHECK_FALSE(clock.resample()); // Redis gone: the old offset stays, no throw
  CHECK(std::chrono::abs(clock.now() - limitcounter::Clock::now()) < 1s);
}

TEST_CASE("at a resample, one of 16 threads sends TIME; the others do not wait",
          "[redis][clock][standalone]") {
  RedisServer server;
  Redis redis(server.options());
  limitcounter::ServerClock clock(redis, 1s);
  const auto calls = [&] { return time_calls(redis); };
  clock.now(); // the first sample
  REQUIRE(calls() == 1);
  std::this_thread::sleep_for(1100ms); // the next sample is due
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&] {
      ++ready;
      while (ready.load() < 16) {
        std::this_thread::yield();
      }
      clock.now();
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  // before: each thread that saw the sample due sent its own TIME (13 of 16 seen)
  CHECK(calls() == 2);
}
