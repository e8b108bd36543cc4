// Redis Sentinel against real processes: a master, a replica and three redis-sentinel
// (tests/support/sentinel_setup). Discovery, a failover under load with the exactly-once
// retries of a careful host, and a demoted master's READONLY.
#include <catch2/catch.hpp>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <limitcounter/limitcounter.hpp>

#include "support/probe.hpp"
#include "support/sentinel_setup.hpp"

using namespace std::chrono_literals;
using limitcounter::Calendar;
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
using limitcounter::Rule;
using limitcounter::RuleSet;
using limitcounter::Transaction;
using limitcounter::Usage;
using limitcounter::testing::error_of;
using limitcounter::testing::RedisServer;
using limitcounter::testing::SentinelSetup;
using limitcounter::testing::unique_prefix;

namespace {

// One merchant's day: at most 5000 per transaction (the larger payments are denied, so the test
// sees both verdicts), no cap on the day's total. A Redis failure is raised: the host decides.
std::unique_ptr<LimitCounter> limits_on(const Redis& redis, const std::string& prefix) {
  LimitCounterOptions options;
  options.key_prefix = prefix;
  auto limits = std::make_unique<LimitCounter>(redis, Calendar("UTC"), options);
  limits->set_rules(RuleSet()
                        .add(Rule("single")
                                 .where("merchant")
                                 .per_transaction()
                                 .max_amount(5000)
                                 .on_redis_failure(FailurePolicy::raise))
                        .add(Rule("day")
                                 .where("merchant")
                                 .per(Period::day)
                                 .max_count(1'000'000)
                                 .on_redis_failure(FailurePolicy::raise)));
  return limits;
}

Transaction payment(const std::string& id, std::int64_t amount) {
  Transaction tx;
  tx.id = id;
  tx.attributes = {{"merchant", "m1"}};
  tx.amount = amount;
  return tx;
}

Usage day_usage(LimitCounter& limits) {
  return limits.usage("merchant", Dimension{"m1"}, Period::day);
}

// As a careful host does: a call that did not run or may have run is sent again with the same
// id until it is decided (for at most a minute: then the last error fails the test). Anything
// else fails the test.
Decision decide(LimitCounter& limits, const Transaction& tx, std::atomic<int>& retries) {
  const auto give_up = std::chrono::steady_clock::now() + 60s;
  for (;;) {
    try {
      return limits.consume(tx);
    } catch (const Error& e) {
      if (e.outcome() == Outcome::failed || std::chrono::steady_clock::now() > give_up) {
        throw;
      }
      ++retries;
      std::this_thread::sleep_for(20ms);
    }
  }
}

// How often `server` answered an error with `code` (INFO errorstats): the server's side.
long long errors_answered(const RedisServer& server, const std::string& code) {
  const std::string stats = Redis(server.options()).command({"INFO", "errorstats"}).as_string();
  const std::string tag = "errorstat_" + code + ":count=";
  const auto at = stats.find(tag);
  return at == std::string::npos ? 0 : std::stoll(stats.substr(at + tag.size()));
}

} // namespace

TEST_CASE("sentinel: redis-sentinel:// finds the master and a consume lands there", "[sentinel]") {
  SentinelSetup setup;
  std::string uri = "redis-sentinel://";
  for (const auto& address : setup.sentinel_addresses()) {
    uri += (uri.back() == '/' ? "" : ",") + address;
  }
  uri += std::string("/") + SentinelSetup::master_name;
  RedisOptions options = RedisOptions::from_uri(uri);
  options.command_timeout = setup.options().command_timeout;
  options.connect_timeout = setup.options().connect_timeout;
  Redis redis(options);
  REQUIRE(redis.is_sentinel());
  const std::string prefix = unique_prefix();
  auto limits = limits_on(redis, prefix);
  REQUIRE(limits->consume(payment("discover-1", 700)).allowed());

  // The key is on the master, read directly.
  REQUIRE(SentinelSetup::role(setup.first_master()) == "master");
  auto on_master = limits_on(Redis(setup.first_master().options()), prefix);
  CHECK(day_usage(*on_master) == Usage{1, 700});
}

TEST_CASE("sentinel: unreachable sentinels and an unknown master name are named", "[sentinel]") {
  SentinelSetup setup;
  RedisOptions options = setup.options();
  options.sentinel_master = "no-such-master";
  const Error unknown = error_of([&] { Redis(options).command({"PING"}); });
  CHECK(unknown.code() == errc::connect_failed);
  CHECK(unknown.outcome() == Outcome::not_sent);
  CHECK_THAT(unknown.what(), Catch::Contains("does not know a master named \"no-such-master\""));
  CHECK_THAT(unknown.what(), Catch::Contains(setup.sentinel_addresses()[2]));

  // Nobody listens on these (a stopped server's port).
  int dead_port = 0;
  {
    RedisServer gone;
    dead_port = gone.port();
  }
  options = setup.options();
  options.sentinels = {"127.0.0.1:" + std::to_string(dead_port)};
  const Error none = error_of([&] { Redis(options).command({"PING"}); });
  CHECK(none.code() == errc::connect_failed);
  CHECK(none.outcome() == Outcome::not_sent);
  CHECK_THAT(none.what(), Catch::Contains("no sentinel gave a usable address"));
  CHECK_THAT(none.what(), Catch::Contains("127.0.0.1:" + std::to_string(dead_port)));
}

TEST_CASE("sentinel: a failover under load moves the library to the new master, each id "
          "decided once",
          "[sentinel]") {
  SentinelSetup setup;
  RedisOptions options = setup.options();
  options.command_timeout = 300ms; // a held write times out (may have run) and is retried
  options.connect_timeout = 300ms;
  options.call_budget = 1000ms;
  // The host retries what timed out (decide): the library's own resends would absorb a held
  // write unseen, and this test checks from both sides that the failover was felt.
  options.retry.max_attempts = 1;
  Redis redis(options);
  const std::string prefix = unique_prefix();
  auto limits = limits_on(redis, prefix);

  constexpr int threads = 4;
  std::atomic<bool> stop{false};
  std::atomic<int> decided_count{0};
  std::atomic<int> retries{0};
  std::mutex mutex;
  struct Decided {
    Transaction tx;
    bool allowed = false; // the decision the host acted on
  };
  std::map<std::string, Decided> decisions; // by id
  std::vector<std::string> failures;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; !stop; ++i) {
        const std::string id = "w" + std::to_string(t) + "-" + std::to_string(i);
        const Transaction tx = payment(id, i % 4 == 0 ? 9000 : 100 + i);
        try {
          const bool allowed = decide(*limits, tx, retries).allowed();
          const std::lock_guard<std::mutex> lock(mutex);
          decisions.emplace(id, Decided{tx, allowed});
          ++decided_count;
        } catch (const Error& e) {
          const std::lock_guard<std::mutex> lock(mutex);
          failures.push_back(id + ": " + e.what());
          return;
        }
      }
    });
  }
  const auto wait_decided = [&](int count) {
    return limitcounter::testing::eventually([&] { return decided_count >= count; });
  };
  CHECK(wait_decided(40));
  REQUIRE(SentinelSetup::role(setup.first_master()) == "master");
  setup.switchover();
  const int at_switch = decided_count;
  CHECK(wait_decided(at_switch + 40)); // the library decides on the new master
  stop = true;
  for (auto& worker : workers) {
    worker.join();
  }

  // The failover happened, from the servers' side.
  CHECK(SentinelSetup::role(setup.first_master()) == "slave");
  CHECK(SentinelSetup::role(setup.first_replica()) == "master");
  CHECK(setup.master_port_named_by(1) == setup.first_replica().port());
  // The held writes were felt: timed out (the host retried them) or, released on the demoted
  // master, refused with READONLY (the library sent them to the new master within their budget).
  CHECK((retries > 0 || errors_answered(setup.first_master(), "READONLY") > 0));

  CHECK(failures == std::vector<std::string>{});

  // On the NEW master: the day's counter holds each allowed id once, and nothing else.
  Usage allowed;
  for (const auto& [id, decided] : decisions) {
    if (decided.allowed) {
      ++allowed.count;
      allowed.amount += decided.tx.amount;
    }
  }
  CHECK(allowed.count > 0);
  CHECK(allowed.count < static_cast<std::int64_t>(decisions.size())); // some were denied
  auto on_new_master = limits_on(Redis(setup.first_replica().options()), prefix);
  CHECK(day_usage(*on_new_master) == allowed);
  // A retry of any id replays the decision the host acted on, and changes nothing.
  for (const auto& [id, decided] : decisions) {
    INFO(id);
    const Decision again = on_new_master->consume(decided.tx);
    CHECK(again.allowed() == decided.allowed);
    CHECK((again.replayed || !again.allowed()));
  }
  CHECK(day_usage(*on_new_master) == allowed);
}

TEST_CASE("sentinel: a demoted master's READONLY is not the caller's: the call runs on the "
          "new master within its budget",
          "[sentinel]") {
  SentinelSetup setup;
  RedisOptions options = setup.options();
  options.call_budget = 5000ms; // the sentinels already name the new master: one hop
  Redis redis(options);
  const std::string prefix = unique_prefix();
  auto limits = limits_on(redis, prefix);
  REQUIRE(limits->consume(payment("before", 100)).allowed()); // pooled connections to the master

  setup.switchover(); // the old master keeps those connections open, and is a replica now
  REQUIRE(SentinelSetup::role(setup.first_master()) == "slave");
  REQUIRE(SentinelSetup::role(setup.first_replica()) == "master");
  const long long readonly_before = errors_answered(setup.first_master(), "READONLY");

  const Decision after = limits->consume(payment("after", 200));
  CHECK(after.allowed());
  CHECK_FALSE(after.replayed);
  // The pooled connection went to the old master, which refused the script: it did not run.
  CHECK(errors_answered(setup.first_master(), "READONLY") > readonly_before);
  // It ran on the new master, once; the payment before the failover was replicated there.
  auto on_new_master = limits_on(Redis(setup.first_replica().options()), prefix);
  CHECK(day_usage(*on_new_master) == Usage{2, 300});
}

TEST_CASE("sentinel: a demoted master without the limits library refuses to load it: the call "
          "loads it on the new master and runs there",
          "[sentinel]") {
  SentinelSetup setup;
  RedisOptions options = setup.options();
  options.call_budget = 5000ms;
  Redis redis(options);
  const std::string prefix = unique_prefix();
  auto limits = limits_on(redis, prefix);
  // pooled connections to the master, which never ran a script: it has no library
  REQUIRE(day_usage(*limits) == Usage{0, 0});

  setup.switchover();
  REQUIRE(SentinelSetup::role(setup.first_master()) == "slave");
  const long long readonly_before = errors_answered(setup.first_master(), "READONLY");

  // FCALL on the old master: "Function not found"; its FUNCTION LOAD: READONLY, which is the
  // call's answer (it did not run), so the sentinels are asked again
  const Decision after = limits->consume(payment("after", 200));
  CHECK(after.allowed());
  CHECK(errors_answered(setup.first_master(), "READONLY") > readonly_before);
  auto on_new_master = limits_on(Redis(setup.first_replica().options()), prefix);
  CHECK(day_usage(*on_new_master) == Usage{1, 200});
}

TEST_CASE("sentinel: a killed master's refused connections make the library ask again until "
          "the sentinels name the new master",
          "[sentinel]") {
  SentinelSetup setup;
  RedisOptions options = setup.options();
  options.connect_timeout = 300ms;
  options.command_timeout = 300ms;
  Redis redis(options);
  const std::string prefix = unique_prefix();
  auto limits = limits_on(redis, prefix);
  REQUIRE(limits->consume(payment("before", 100)).allowed());
  // The replica has it before the crash (WAIT: one replica acknowledged).
  REQUIRE(Redis(setup.first_master().options()).command({"WAIT", "1", "5000"}).as_integer() == 1);

  setup.first_master().kill(); // SIGKILL: a crash; the sentinels elect the replica
  std::atomic<int> retries{0};
  CHECK(decide(*limits, payment("after", 200), retries).allowed());
  CHECK(retries > 0); // refused until the sentinels had moved

  CHECK(SentinelSetup::role(setup.first_replica()) == "master");
  // (the library may have heard it from another sentinel: sentinel 0 names the new master once
  // the failover's leader has told it, which a slow machine shows some time later)
  CHECK(limitcounter::testing::eventually(
      [&] { return setup.master_port_named_by(0) == setup.first_replica().port(); }));
  auto on_new_master = limits_on(Redis(setup.first_replica().options()), prefix);
  CHECK(day_usage(*on_new_master) == Usage{2, 300});
}

TEST_CASE("sentinel: the least-privilege ACL is enough to find the master (ROLE)", "[sentinel]") {
  SentinelSetup setup;
  const std::string prefix = unique_prefix();
  std::vector<std::string> setuser{"ACL", "SETUSER", "lc-sentinel", "on", ">lc-pw"};
  std::istringstream rules(limitcounter::least_privilege_acl({prefix}));
  for (std::string rule; rules >> rule;) {
    setuser.push_back(rule);
  }
  // ACLs are not replicated: a user must exist on every server that may become the master.
  for (RedisServer* server : {&setup.first_master(), &setup.first_replica()}) {
    REQUIRE(Redis(server->options()).command(setuser).as_string() == "OK");
  }
  RedisOptions options = setup.options();
  options.user = "lc-sentinel";
  options.password = "lc-pw";
  auto limits = limits_on(Redis(options), prefix);
  CHECK(limits->consume(payment("acl-1", 100)).allowed());
}
