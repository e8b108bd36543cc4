#include <catch2/catch.hpp>

#include <atomic>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include <limitcounter/error.hpp>
#include <limitcounter/red_packet.hpp>

#include "support/redis_server.hpp"
#include "support/topology.hpp"

using namespace std::chrono_literals;
using limitcounter::Clock;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::GrabResult;
using limitcounter::PacketOptions;
using limitcounter::PayoutTask;
using limitcounter::Redis;
using limitcounter::RedPacketOptions;
using limitcounter::RedPacketPool;
using limitcounter::testing::test_options;
using limitcounter::testing::unique_prefix;

namespace {

struct PoolFixture {
  Redis redis{test_options()};
  RedPacketPool pool{redis, options()};

  static RedPacketOptions options() {
    RedPacketOptions o;
    o.key_prefix = unique_prefix() + "rp:";
    o.partitions = 4;
    o.visibility_timeout = 300ms;
    o.max_payout_attempts = 3;
    o.payout_backoff = 1ms;
    return o;
  }
  std::vector<PayoutTask> take_all(std::size_t max = 1000) {
    std::vector<PayoutTask> tasks;
    for (std::uint32_t p = 0; p < pool.keys().partitions(); ++p) {
      auto some = pool.take_payouts(p, max);
      tasks.insert(tasks.end(), some.begin(), some.end());
    }
    return tasks;
  }
};

} // namespace

TEST_CASE_METHOD(PoolFixture, "3N grabbers for N packets: exactly N granted, the sum exact",
                 "[redpacket][redis][concurrency]") {
  constexpr int packets = 200;
  limitcounter::SplitOptions split_options;
  split_options.seed = 42;
  const auto amounts = limitcounter::split(100'000, packets, split_options);
  pool.create("pk-1", amounts);

  std::mutex mutex;
  std::map<std::string, std::int64_t> granted;
  std::atomic<int> sold_out{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 12; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 3 * packets / 12; ++i) {
        const std::string user = "u" + std::to_string(t * 1000 + i);
        const GrabResult result = pool.grab("pk-1", user);
        if (result.status == GrabResult::Status::granted) {
          const std::lock_guard<std::mutex> lock(mutex);
          CHECK(granted.emplace(user, result.amount).second);
        } else {
          CHECK(result.status == GrabResult::Status::sold_out);
          ++sold_out;
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  CHECK(granted.size() == packets);
  CHECK(sold_out == 2 * packets);
  std::int64_t sum = 0;
  for (const auto& [user, amount] : granted) {
    sum += amount;
  }
  CHECK(sum == 100'000);
  CHECK(redis.command({"LLEN", pool.keys().packet("pk-1", "list")}).as_integer() == 0);
  const auto tasks = take_all();
  CHECK(tasks.size() == packets);

  // a repeat grab gives the same amount back
  const auto& [some_user, some_amount] = *granted.begin();
  const GrabResult again = pool.grab("pk-1", some_user);
  CHECK(again.status == GrabResult::Status::already);
  CHECK(again.amount == some_amount);
}

TEST_CASE_METHOD(PoolFixture, "attempts are capped; expiry and closing return the leftover once",
                 "[redpacket][redis]") {
  PacketOptions options;
  options.max_attempts_per_user = 2;
  options.expires_at = Clock::now() + 1h;
  pool.create("pk-2", {100, 200, 300}, options);
  CHECK(pool.grab("pk-2", "alice").status == GrabResult::Status::granted);
  CHECK(pool.grab("pk-2", "alice").status == GrabResult::Status::already);
  CHECK(pool.grab("pk-2", "alice").status == GrabResult::Status::too_many_attempts);
  CHECK_THROWS_MATCHES(pool.create("pk-2", {1}), Error, Catch::Predicate<Error>([](const Error& e) {
                         return e.code() == errc::conflict;
                       }));

  // after the expiry grabs are refused without counting; close returns the rest once
  CHECK(pool.grab("pk-2", "bob", Clock::now() + 2h).status == GrabResult::Status::expired);
  const auto closed = pool.close_expired(Clock::now() + 2h);
  REQUIRE(closed.size() == 1);
  CHECK(closed[0].first == "pk-2");
  CHECK(closed[0].second.closed_now);
  CHECK(closed[0].second.leftover == 500);
  CHECK(closed[0].second.packets_left == 2);
  const auto twice = pool.close("pk-2");
  CHECK_FALSE(twice.closed_now);
  CHECK(twice.leftover == 0);
  CHECK(pool.grab("pk-2", "bob").status == GrabResult::Status::expired);

  CHECK_THROWS_MATCHES(
      pool.grab("no-such", "bob"), Error,
      Catch::Predicate<Error>([](const Error& e) { return e.code() == errc::not_found; }));
  CHECK_THROWS_AS(pool.grab("pk-2", "bo b"), Error);
  CHECK_THROWS_AS(pool.create("pk-3", {5, 0}), Error);
  CHECK_THROWS_AS(pool.create("pk-3", {}), Error);
  CHECK(redis.command({"EXISTS", pool.keys().packet("pk-3", "meta")}).as_integer() == 0);
}

TEST_CASE_METHOD(PoolFixture, "a worker that dies mid-task: the task comes back and is paid once",
                 "[redpacket][redis][payout]") {
  pool.create("pk-4", {10, 20, 30});
  for (const char* user : {"a", "b", "c"}) {
    REQUIRE(pool.grab("pk-4", user).status == GrabResult::Status::granted);
  }
  const auto lost = take_all(); // this worker "dies": it never acknowledges
  REQUIRE(lost.size() == 3);
  CHECK(take_all().empty()); // leased: nobody else gets them meanwhile

  std::this_thread::sleep_for(400ms); // past the visibility timeout
  std::map<std::string, int> payments;
  const std::size_t paid = pool.run_payouts([&](const PayoutTask& task) {
    ++payments[task.idempotency_key()];
    CHECK(task.attempt == 2);
    return true;
  });
  CHECK(paid == 3);
  CHECK(payments == std::map<std::string, int>{{"pk-4:a", 1}, {"pk-4:b", 1}, {"pk-4:c", 1}});
  // the dead worker wakes up: its leases are stale, nothing is paid twice or lost
  for (const auto& task : lost) {
    CHECK_FALSE(pool.ack_payout(task));
  }
  CHECK(pool.run_payouts([](const PayoutTask&) { return true; }) == 0);
  CHECK(redis.command({"HLEN", pool.keys().packet("pk-4", "paid")}).as_integer() == 3);
}

TEST_CASE_METHOD(PoolFixture, "failing payouts are retried, then dead-lettered",
                 "[redpacket][redis][payout]") {
  pool.create("pk-5", {7});
  REQUIRE(pool.grab("pk-5", "zed").status == GrabResult::Status::granted);
  int calls = 0;
  for (int round = 0; round < 10 && calls < 3; ++round) {
    pool.run_payouts([&](const PayoutTask&) {
      ++calls;
      if (calls == 2) {
        throw std::runtime_error("bank down"); // a throw is a failure too
      }
      return false;
    });
    std::this_thread::sleep_for(20ms); // past the back-off
  }
  CHECK(calls == 3);
  const auto partition = pool.keys().partition_of("pk-5");
  CHECK(pool.dead_payouts(partition) == std::vector<std::string>{"pk-5:zed:7:3"});
  CHECK(pool.run_payouts([](const PayoutTask&) { return true; }) == 0);
}

TEST_CASE_METHOD(PoolFixture, "grab_many pipelines grabs", "[redpacket][redis][batch]") {
  pool.create("pk-6", limitcounter::split(1000, 50));
  std::vector<std::string> users;
  for (int i = 0; i < 80; ++i) {
    users.push_back("user" + std::to_string(i));
  }
  const auto results = pool.grab_many("pk-6", users);
  REQUIRE(results.size() == 80);
  std::int64_t sum = 0;
  int granted = 0;
  for (const auto& result : results) {
    granted += result.status == GrabResult::Status::granted ? 1 : 0;
    sum += result.status == GrabResult::Status::granted ? result.amount : 0;
  }
  CHECK(granted == 50);
  CHECK(sum == 1000);
}
