#include <catch2/catch.hpp>

#include <atomic>
#include <set>
#include <thread>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/limitcounter.hpp>

#include "redis/key_slot.hpp"
#include "support/probe.hpp"
#include "support/redis_cluster.hpp"

using namespace std::chrono_literals;
using namespace limitcounter;
using limitcounter::testing::shared_cluster;
using limitcounter::testing::unique_prefix;

namespace {

LimitCounterOptions counter_options(const std::string& prefix) {
  LimitCounterOptions options;
  options.key_prefix = prefix;
  return options;
}

} // namespace

TEST_CASE("period counters of many names spread over the slots of three masters", "[cluster]") {
  Redis redis(shared_cluster().options());
  LimitCounter counter(redis, Calendar("Asia/Shanghai"),
                       counter_options(unique_prefix() + "trans:limit:"));
  std::set<std::uint16_t> slots;
  std::vector<AddRequest> batch;
  for (int c = 0; c < 30; ++c) {
    const std::string name = "counter" + std::to_string(c);
    slots.insert(detail::key_slot(counter.keys().window(name, Period::day, "x")));
    counter.add(name, Dimension{"Ali", "Deduct", "cmb"}, {Period::day, Period::month}, 1, 100);
    batch.push_back({name, Dimension{"Ali", "Deduct", "cib"}, {Period::day}, 2, 50, Clock::now()});
  }
  CHECK(slots.size() > 10);
  const auto results = counter.add_many(batch); // one pipeline per node
  for (const auto& result : results) {
    REQUIRE(std::holds_alternative<std::vector<WindowUsage>>(result));
  }
  for (int c = 0; c < 30; ++c) {
    const std::string name = "counter" + std::to_string(c);
    CHECK(counter.usage(name, Dimension{"Ali", "Deduct", "cmb"}, Period::month) == Usage{1, 100});
    CHECK(counter.usage(name, Dimension{"Ali", "Deduct", "cib"}, Period::day) == Usage{2, 50});
  }
  CHECK(counter.take_daily_cap("sms", "acct-1", 2).allowed());
  CHECK(counter.hit_sliding_window("pay", "m1", 1, 10s).allowed());
  CHECK_FALSE(counter.hit_sliding_window("pay", "m1", 1, 10s).allowed());
}

TEST_CASE("with buckets, the 1,000 dimensions of one shape land on every master",
          "[cluster][buckets]") {
  Redis redis(shared_cluster().options());
  const std::string prefix = unique_prefix() + "spread:";
  LimitCounterOptions options = counter_options(prefix);
  options.counter_buckets = 64;
  LimitCounter counter(redis, Calendar("UTC"), options);
  std::vector<AddRequest> adds;
  for (int i = 0; i < 1000; ++i) {
    adds.push_back({"channel+dept",
                    Dimension{"Ali", "d" + std::to_string(i)},
                    {Period::day},
                    1,
                    i,
                    Clock::now()});
  }
  counter.add_many(adds);
  // KEYS is per node: each master holds some of the shape's bucket hashes
  std::size_t total = 0;
  for (auto* node : shared_cluster().nodes()) {
    const Reply keys = Redis(node->options()).command({"KEYS", prefix + "*"});
    INFO("node " << node->port());
    CHECK(keys.as_array().size() > 5);
    total += keys.as_array().size();
  }
  CHECK(total == 64); // one day hash per bucket
  CHECK(counter.usage("channel+dept", Dimension{"Ali", "d999"}, Period::day) == Usage{1, 999});
}

TEST_CASE("a call whose keys span slots is refused before it is sent", "[cluster]") {
  Redis redis(shared_cluster().options());
  try {
    redis.eval(scripts::counter_add, {"{a}:x", "{b}:y"}, {"f", "1", "1", "1", "1"});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == errc::cross_slot);
    CHECK(e.outcome() == Outcome::not_sent);
    CHECK_THAT(e.what(), Catch::Contains("{a}:x") && Catch::Contains("{b}:y"));
  }
}

TEST_CASE("scripts reload on the node that lost them", "[cluster][scripts]") {
  Redis redis(shared_cluster().options());
  LimitCounter counter(redis, Calendar("UTC"), counter_options(unique_prefix() + "s:"));
  counter.add("c", Dimension{"a"}, {Period::day}, 1, 1);
  for (auto* node : shared_cluster().nodes()) {
    Redis(node->options()).command({"SCRIPT", "FLUSH"});
  }
  CHECK(counter.add("c", Dimension{"a"}, {Period::day}, 1, 1)[0].usage == Usage{2, 2});
}

TEST_CASE("wallets and red packets on a cluster", "[cluster]") {
  Redis redis(shared_cluster().options());
  WalletOptions wallet_options;
  wallet_options.key_prefix = unique_prefix() + "wallet:";
  wallet_options.partitions = 8;
  Wallet wallet(redis, wallet_options);
  for (int u = 0; u < 20; ++u) {
    const std::string user = "user" + std::to_string(u);
    REQUIRE(wallet.load(user, {1000, 1, 0}));
    REQUIRE(wallet.deduct(user, "o1", 100).status == WalletResult::Status::ok);
    REQUIRE(wallet.credit(user, "t1", 50).status == WalletResult::Status::ok);
  }
  JournalConsumer consumer(redis, wallet_options);
  std::size_t events = 0;
  while (const std::size_t handled = consumer.poll([](const auto&) {})) {
    events += handled;
  }
  CHECK(events == 40);
  for (std::uint32_t p = 0; p < wallet_options.partitions; ++p) {
    CHECK(wallet.stale_pending(p, 0ms).empty());
  }
  CHECK(wallet.account("user7")->balance == 950);

  RedPacketOptions packet_options;
  packet_options.key_prefix = unique_prefix() + "rp:";
  packet_options.partitions = 8;
  RedPacketPool pool(redis, packet_options);
  std::int64_t granted = 0;
  for (int p = 0; p < 10; ++p) {
    const std::string packet = "packet" + std::to_string(p);
    pool.create(packet, split(1000, 10));
    for (const auto& result : pool.grab_many(packet, {"a", "b", "c"})) {
      granted += std::get<GrabResult>(result).amount;
    }
  }
  std::size_t paid = 0;
  while (const std::size_t some = pool.run_payouts([](const PayoutTask&) { return true; })) {
    paid += some;
  }
  CHECK(paid == 30);
  CHECK(granted > 0);
}

TEST_CASE("a slot migrating under load: ASK, then MOVED, and every add counts once",
          "[cluster][migration]") {
  Redis redis(shared_cluster().options());
  LimitCounter counter(redis, Calendar("UTC"), counter_options(unique_prefix() + "mig:"));
  const std::string key = counter.keys().window(
      "moving", Period::day, Calendar("UTC").window(Period::day, Clock::now()).id);
  const int slot = detail::key_slot(key);
  testing::RedisServer* target = nullptr;
  for (auto* node : shared_cluster().nodes()) {
    if (node != &shared_cluster().owner_of(slot)) {
      target = node;
    }
  }
  REQUIRE(target != nullptr);
  counter.add("moving", Dimension{"d"}, {Period::day}, 1, 1);

  std::atomic<bool> stop{false};
  std::atomic<int> adds{1};
  std::atomic<int> failures{0};
  std::thread writer([&] {
    while (!stop) {
      try {
        counter.add("moving", Dimension{"d"}, {Period::day}, 1, 1);
        ++adds;
      } catch (const Error&) {
        ++failures;
      }
    }
  });
  std::this_thread::sleep_for(100ms);
  shared_cluster().migrate_slot(slot, *target);
  std::this_thread::sleep_for(100ms);
  stop = true;
  writer.join();
  CHECK(failures == 0);
  CHECK(&shared_cluster().owner_of(slot) == target);
  CHECK(counter.usage("moving", Dimension{"d"}, Period::day) == Usage{adds, adds});
}

TEST_CASE("half way through a migration the library follows ASK without learning it as the map",
          "[cluster][migration]") {
  Redis redis(shared_cluster().options());
  LimitCounter counter(redis, Calendar("UTC"), counter_options(unique_prefix() + "ask:"));
  counter.add("asked", Dimension{"d"}, {Period::day}, 1, 1);
  const std::string key = counter.keys().window(
      "asked", Period::day, Calendar("UTC").window(Period::day, Clock::now()).id);
  const int slot = detail::key_slot(key);
  testing::RedisServer& source = shared_cluster().owner_of(slot);
  testing::RedisServer* target = nullptr;
  for (auto* node : shared_cluster().nodes()) {
    target = node != &source ? node : target;
  }
  Redis target_direct(target->options());
  const auto asking_calls = [&] { return testing::command_calls(target_direct, "asking"); };
  const long long asked_before = asking_calls();
  shared_cluster().begin_migration(slot, source, *target);
  shared_cluster().move_keys(slot, source, *target); // the key is on the target, the slot not yet
  CHECK(counter.add("asked", Dimension{"d"}, {Period::day}, 1, 1)[0].usage == Usage{2, 2});
  CHECK(asking_calls() > asked_before);
  shared_cluster().finish_migration(slot, *target);
  CHECK(counter.add("asked", Dimension{"d"}, {Period::day}, 1, 1)[0].usage == Usage{3, 3}); // MOVED
}

TEST_CASE("limits across slots: all or nothing by voiding, idempotent, refunds and holds",
          "[cluster][limits]") {
  Redis redis(shared_cluster().options());
  LimitCounter limits(redis, Calendar("UTC"), counter_options(unique_prefix() + "lim:"));
  REQUIRE(detail::key_slot("{dept}") != detail::key_slot("{merchant}"));
  // the dept share is decided first, the merchant share second: a merchant denial must void
  // what the dept share counted
  limits.set_rules(RuleSet()
                       .add(Rule("dept-day").where("dept").per(Period::day).max_count(100))
                       .add(Rule("merchant-day").where("merchant").per(Period::day).max_count(3)));
  const auto tx = [](const std::string& id) {
    return Transaction{id, {{"merchant", "m1"}, {"dept", "cmb"}}, 10};
  };
  for (int i = 0; i < 3; ++i) {
    const Decision d = limits.consume(tx("c" + std::to_string(i)));
    REQUIRE(d.allowed());
    CHECK(d.rules.size() == 2);
  }
  const Decision fourth = limits.consume(tx("c3"));
  CHECK_FALSE(fourth.allowed());
  CHECK(fourth.denial->rule == "merchant-day");
  CHECK(limits.usage("dept", Dimension{"cmb"}, Period::day) == Usage{3, 30}); // voided
  CHECK(limits.usage("merchant", Dimension{"m1"}, Period::day) == Usage{3, 30});
  const Decision again = limits.consume(tx("c3"));
  CHECK(again.replayed);
  CHECK_FALSE(again.allowed());
  CHECK(limits.consume(tx("c0")).replayed);

  CHECK(limits.refund("c0").refunded_now == 10); // both shares give back
  CHECK(limits.usage("dept", Dimension{"cmb"}, Period::day) == Usage{2, 20});
  CHECK(limits.usage("merchant", Dimension{"m1"}, Period::day) == Usage{2, 20});
  CHECK(limits.reserve(tx("h1")).allowed());
  const CancelResult cancelled = limits.cancel("h1");
  CHECK(cancelled.status == CancelResult::Status::cancelled);
  CHECK_FALSE(cancelled.replayed);
  CHECK(limits.usage("dept", Dimension{"cmb"}, Period::day) == Usage{2, 20});
  CHECK_THROWS_AS(limits.refund("never"), Error);

  // many threads: the shares stay equal and the merchant limit holds
  limits.set_rules(RuleSet()
                       .add(Rule("dept-day").where("dept").per(Period::day).max_count(1000))
                       .add(Rule("merchant-day").where("merchant").per(Period::day).max_count(40)));
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        limits.consume(tx("p" + std::to_string(t) + "-" + std::to_string(i)));
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  const Usage merchant = limits.usage("merchant", Dimension{"m1"}, Period::day);
  CHECK(merchant.count == 40);
  CHECK(limits.usage("dept", Dimension{"cmb"}, Period::day) == merchant);

  // a batch of transactions that span two slots: decided share by share
  limits.set_rules(RuleSet()
                       .add(Rule("dept-day").where("dept").per(Period::day).max_count(1000))
                       .add(Rule("merchant-day").where("merchant").per(Period::day).max_count(45)));
  std::vector<Transaction> batch;
  for (int i = 0; i < 10; ++i) {
    batch.push_back(tx("b" + std::to_string(i)));
  }
  int allowed = 0;
  for (const auto& result : limits.consume_many(batch)) {
    REQUIRE(std::holds_alternative<Decision>(result));
    allowed += std::get<Decision>(result).allowed() ? 1 : 0;
  }
  CHECK(allowed == 5);
  CHECK(limits.usage("merchant", Dimension{"m1"}, Period::day).count == 45);
  CHECK(limits.usage("dept", Dimension{"cmb"}, Period::day).count == 45);
}

TEST_CASE("a master fails over to its replica: the library recovers, retries apply once",
          "[cluster][failover]") {
  testing::RedisCluster cluster(3, 1);
  RedisOptions options = cluster.options();
  options.breaker_failures = 0; // this test watches every attempt
  options.connect_timeout = 200ms;
  Redis redis(options);
  LimitCounter limits(redis, Calendar("UTC"), counter_options(unique_prefix() + "fo:"));
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_count(1000)));
  const auto tx = [](const std::string& id) { return Transaction{id, {{"merchant", "m1"}}, 10}; };
  REQUIRE(limits.consume(tx("before")).allowed());

  const int slot = detail::key_slot("{merchant}");
  testing::RedisServer& master = cluster.owner_of(slot);
  // make sure the replica has the write before the master dies (replication is asynchronous;
  // WAIT would only count the writes of its own connection): the replica's offset reaches the
  // master's
  const auto field = [](Redis& node, const std::string& name) -> long long {
    const std::string info = node.command({"INFO", "replication"}).as_string();
    const auto at = info.find(name + ":");
    return at == std::string::npos ? -1 : std::stoll(info.substr(at + name.size() + 1));
  };
  Redis direct(master.options());
  const long long written = field(direct, "master_repl_offset");
  bool replicated = false;
  testing::RedisServer* replica_node = nullptr;
  for (testing::RedisServer* node : cluster.nodes()) {
    Redis candidate(node->options());
    if (node == &master || field(candidate, "master_port") != master.port()) {
      continue;
    }
    replica_node = node;
    // and the replica holds the counter the transaction moved (read there, READONLY)
    RedisOptions replica_options = node->options();
    replica_options.pool_size = 1;
    Redis replica(replica_options);
    replica.command({"READONLY"});
    const std::string counter_key =
        limits.keys().window(limits.keys().tag("merchant", "m1"), Period::day,
                             limits.calendar().window(Period::day, Clock::now()).id);
    replicated = testing::eventually([&] {
      const Reply value = replica.command({"HGET", counter_key, "m1"});
      return field(candidate, "slave_repl_offset") >= written && !value.is_nil() &&
             value.as_string() == "1:10";
    });
  }
  REQUIRE(replicated);
  REQUIRE(replica_node != nullptr);
  master.kill();

  // Promotion is the cluster's job, not the library's: wait for it on the server's side first,
  // so that a slow election on a loaded machine is told apart from a library that does not
  // recover. An election the loaded machine has not finished in 20 s is forced (TAKEOVER needs
  // no votes); the library's part of the test is the same either way.
  {
    Redis replica(replica_node->options());
    const auto is_master = [&] {
      return replica.command({"INFO", "replication"}).as_string().find("role:master") !=
             std::string::npos;
    };
    if (!testing::eventually(is_master, 20s)) {
      WARN("the replica was not elected within 20 s; forcing its takeover");
      replica.command({"CLUSTER", "FAILOVER", "TAKEOVER"});
      REQUIRE(testing::eventually(is_master, 20s));
    }
  }

  // retry the same transactions until the library has found the promoted replica
  const auto until_answered = [&](const std::string& id) {
    const auto deadline = Clock::now() + 30s;
    for (;;) {
      try {
        return limits.consume(tx(id));
      } catch (const Error& e) {
        INFO("the last attempt failed with: " << e.what());
        REQUIRE(Clock::now() < deadline);
        std::this_thread::sleep_for(100ms);
      }
    }
  };
  const Decision after = until_answered("after");
  CHECK(after.allowed());
  CHECK(until_answered("before").replayed); // the pre-failover decision survived
  CHECK(until_answered("after").replayed);  // and the retry after it applied once
  // every node learns the new owner by gossip, some a little later than others
  const auto deadline = Clock::now() + 10s;
  while (&cluster.owner_of(slot) == &master && Clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  CHECK(&cluster.owner_of(slot) != &master);
  const Usage used = limits.usage("merchant", Dimension{"m1"}, Period::day);
  // (seen once under a loaded machine: what moved, and what the records say, for the next time)
  const auto state = [&](const std::string& id) {
    const auto record = limits.transaction_record(id);
    return record ? std::string(to_string(record->state)) + " " +
                        std::to_string(record->counter_keys.size())
                  : "none";
  };
  INFO("usage " << used.count << ":" << used.amount << "; before " << state("before") << "; after "
                << state("after"));
  CHECK(used == Usage{2, 20});
}
