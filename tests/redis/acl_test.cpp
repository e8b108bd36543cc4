#include <catch2/catch.hpp>

#include <sstream>

#include <limitcounter/acl.hpp>
#include <limitcounter/limitcounter.hpp>

#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using limitcounter::Redis;
using limitcounter::RedisOptions;
using limitcounter::testing::RedisServer;

TEST_CASE("every job works under the least-privilege ACL, and nothing more is allowed",
          "[redis][acl][standalone]") {
  RedisServer server;
  Redis admin(server.options());
  std::vector<std::string> setuser{"ACL", "SETUSER", "limitcounter", "on", ">lc-secret-pw"};
  std::istringstream rules(
      limitcounter::least_privilege_acl({"acl:limit:", "acl:wallet:", "acl:rp:"}));
  for (std::string rule; rules >> rule;) {
    setuser.push_back(rule);
  }
  REQUIRE(admin.command(setuser).as_string() == "OK");
  admin.command({"SCRIPT", "FLUSH"}); // the user must be able to load the scripts itself

  RedisOptions options = server.options();
  options.user = "limitcounter";
  options.password = "lc-secret-pw";
  Redis redis(options);

  limitcounter::LimitCounterOptions limit_options;
  limit_options.key_prefix = "acl:limit:";
  limitcounter::LimitCounter limits(redis, limitcounter::Calendar("Asia/Shanghai"), limit_options);
  limits.set_rules(limitcounter::RuleSet().add(
      limitcounter::Rule("day").where("merchant").per(limitcounter::Period::day).max_amount(1000)));
  limitcounter::Transaction tx{"acl-1", {{"merchant", "m1"}}, 100};
  CHECK(limits.consume(tx).allowed());
  CHECK(limits.reserve({"acl-2", {{"merchant", "m1"}}, 100}).allowed());
  CHECK(limits.confirm("acl-2", 50).released == 50);
  CHECK(limits.refund("acl-1").refunded_now == 100);
  CHECK(limits.take_daily_cap("sms", "a1", 5).allowed);
  CHECK(limits.hit_sliding_window("pay", "m1", 5, 1s).allowed);
  CHECK(limits.usage("merchant", limitcounter::Dimension{"m1"}, limitcounter::Period::day).amount ==
        50);

  limitcounter::WalletOptions wallet_options;
  wallet_options.key_prefix = "acl:wallet:";
  limitcounter::Wallet wallet(redis, wallet_options);
  CHECK(wallet.load("u1", {1000, 1, 0}));
  CHECK(wallet.deduct("u1", "o1", 10).status == limitcounter::WalletResult::Status::ok);
  CHECK(wallet.rollback("u1", "o1") == limitcounter::RollbackResult::rolled_back);
  limitcounter::JournalConsumer consumer(redis, wallet_options);
  CHECK(consumer.poll([](const auto&) {}) == 2);
  CHECK(wallet.account("u1")->balance == 1000);

  limitcounter::RedPacketOptions packet_options;
  packet_options.key_prefix = "acl:rp:";
  limitcounter::RedPacketPool pool(redis, packet_options);
  pool.create("p1", {5, 5});
  CHECK(pool.grab("p1", "u1").status == limitcounter::GrabResult::Status::granted);
  CHECK(pool.run_payouts([](const limitcounter::PayoutTask&) { return true; }) == 1);
  CHECK(pool.close("p1").leftover == 5);

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
  const auto calls = [&] {
    const std::string stats = redis.command({"INFO", "commandstats"}).as_string();
    const auto at = stats.find("cmdstat_time:calls=");
    return at == std::string::npos ? 0 : std::stoi(stats.substr(at + 19));
  };
  const int sampled = calls();
  for (int i = 0; i < 100; ++i) {
    clock.now();
  }
  CHECK(calls() == sampled); // sampled, not per call
  server.stop();
  CHECK_FALSE(clock.resample()); // Redis gone: the old offset stays, no throw
  CHECK(std::chrono::abs(clock.now() - limitcounter::Clock::now()) < 1s);
}
