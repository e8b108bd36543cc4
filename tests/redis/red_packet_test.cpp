#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>
#include <tuple>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/error.hpp>
#include <limitcounter/red_packet.hpp>

#include "red_packets/red_packet_codec.hpp"
#include "support/outcome.hpp"
#include "support/probe.hpp"
#include "support/redis_server.hpp"
#include "support/topology.hpp"

using namespace std::chrono_literals;
using limitcounter::Clock;
using limitcounter::CloseResult;
using limitcounter::CreateResult;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::GrabResult;
using limitcounter::PacketOptions;
using limitcounter::PayoutTask;
using limitcounter::Redis;
using limitcounter::RedisOptions;
using limitcounter::RedPacketOptions;
using limitcounter::RedPacketPool;
using limitcounter::Reply;
using limitcounter::TimePoint;
using limitcounter::testing::outcome;
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

TEST_CASE_METHOD(PoolFixture, "pool options out of range are refused, naming the value",
                 "[redpacket][redis]") {
  const auto refused = [&](const std::function<void(RedPacketOptions&)>& change,
                           const std::string& needle) {
    RedPacketOptions bad = options();
    change(bad);
    const Error e = limitcounter::testing::error_of([&] { RedPacketPool(redis, bad); });
    CHECK(e.code() == errc::invalid_argument);
    CHECK(e.outcome() == limitcounter::Outcome::not_sent);
    CHECK_THAT(e.what(), Catch::Contains(needle));
  };
  refused([](RedPacketOptions& o) { o.max_payout_attempts = 0; }, "max_payout_attempts 0");
  refused([](RedPacketOptions& o) { o.retention = 0ms; }, "got 0 ms and 300 ms");
  refused([](RedPacketOptions& o) { o.retention = -5ms; }, "got -5 ms");
  refused([](RedPacketOptions& o) { o.visibility_timeout = 0ms; }, "and 0 ms");
  refused([](RedPacketOptions& o) { o.payout_backoff = -1ms; }, "payout_backoff");
}

TEST_CASE_METHOD(PoolFixture, "a payout's back-off stops doubling at 2^42 ms",
                 "[redpacket][redis][payout]") {
  RedPacketOptions many = options();
  many.max_payout_attempts = 100;
  many.payout_backoff = 1s;
  RedPacketPool patient(redis, many);
  patient.create("pk-bo", {5});
  REQUIRE(patient.grab("pk-bo", "u1").status == GrabResult::Status::granted);
  const std::uint32_t partition = patient.keys().partition_of("pk-bo");
  const auto tasks = patient.take_payouts(partition, 1);
  REQUIRE(tasks.size() == 1);
  // the task as it is after 60 failed attempts: 1 s x 2^59 is no integer a script formats
  const std::string task_key = patient.keys().payout(partition, "tasks");
  const std::string entry = redis.command({"HGET", task_key, "pk-bo:u1"}).as_string();
  const auto first = entry.find(':');
  const auto second = entry.find(':', first + 1);
  redis.command(
      {"HSET", task_key, "pk-bo:u1", entry.substr(0, first + 1) + "60" + entry.substr(second)});
  const auto now = Clock::now();
  CHECK_FALSE(patient.fail_payout(tasks[0], now)); // retried, not dead
  const std::int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  CHECK(redis.command({"ZSCORE", patient.keys().payout(partition, "ready"), "pk-bo:u1"})
            .as_string() == std::to_string(now_ms + (std::int64_t{1} << 42)));
}

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
  CHECK(outcome(again) == std::pair(GrabResult::Status::granted, true));
  CHECK(again.amount == some_amount);
}

TEST_CASE_METHOD(PoolFixture, "attempts are capped; expiry and closing return the leftover once",
                 "[redpacket][redis]") {
  PacketOptions options;
  options.max_attempts_per_user = 2;
  options.expires_at = Clock::now() + 1h;
  pool.create("pk-2", {100, 200, 300}, options);
  CHECK(outcome(pool.grab("pk-2", "alice")) == std::pair(GrabResult::Status::granted, false));
  CHECK(outcome(pool.grab("pk-2", "alice")) == std::pair(GrabResult::Status::granted, true));
  CHECK(outcome(pool.grab("pk-2", "alice")) ==
        std::pair(GrabResult::Status::granted, true)); // a winner, always
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
  CHECK(twice.replayed);
  CHECK(twice.leftover == 500); // the same leftover: a retry after a lost reply loses nothing
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
  for (const auto& batch_result : results) {
    const auto& result = std::get<GrabResult>(batch_result);
    granted += result.status == GrabResult::Status::granted ? 1 : 0;
    sum += result.status == GrabResult::Status::granted ? result.amount : 0;
  }
  CHECK(granted == 50);
  CHECK(sum == 1000);
}

namespace {

bool is_code(const Error& e, errc code) { return e.code() == code; }

std::int64_t list_sum(Redis& redis, const std::string& key) {
  std::int64_t sum = 0;
  const limitcounter::Reply amounts = redis.command({"LRANGE", key, "0", "-1"});
  for (const auto& amount : amounts.as_array()) {
    sum += amount.to_int64();
  }
  return sum;
}

} // namespace

TEST_CASE_METHOD(PoolFixture, "create is idempotent by id and content; other content conflicts",
                 "[redpacket][redis][exactly-once]") {
  PacketOptions options;
  options.expires_at = Clock::now() + 1h;
  const CreateResult first = pool.create("pk-c", {100, 200, 300}, options);
  CHECK(first.created_now);
  CHECK_FALSE(first.replayed);
  CHECK(first.chunks_stored == 1);
  // the same call again, as a host retries after a lost reply: success, nothing pushed twice
  const CreateResult again = pool.create("pk-c", {100, 200, 300}, options);
  CHECK_FALSE(again.created_now);
  CHECK(again.replayed);
  CHECK(again.chunks_stored == 0);
  CHECK(redis.command({"LLEN", pool.keys().packet("pk-c", "list")}).as_integer() == 3);

  const auto conflicts = [&](const std::vector<std::int64_t>& amounts, const PacketOptions& o) {
    try {
      pool.create("pk-c", amounts, o);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.code() == errc::conflict);
      CHECK_THAT(e.what(), Catch::Contains("pk-c"));
    }
  };
  conflicts({100, 200, 301}, options);
  conflicts({300, 200, 100}, options); // the order is content too: it is the draw order
  conflicts({100, 200, 300, 1}, options);
  PacketOptions other = options;
  other.max_attempts_per_user = 3;
  conflicts({100, 200, 300}, other);
  other = options;
  other.expires_at += 1s;
  conflicts({100, 200, 300}, other);
  CHECK(list_sum(redis, pool.keys().packet("pk-c", "list")) == 600); // untouched
  CHECK(pool.grab("pk-c", "u1").amount == 100);
}

TEST_CASE_METHOD(PoolFixture,
                 "a large packet is stored in bounded chunks and grabbable only once complete; "
                 "a retry after lost chunks finishes it without pushing a chunk twice",
                 "[redpacket][redis][exactly-once]") {
  constexpr std::int64_t count = 200'000;
  limitcounter::SplitOptions split_options;
  split_options.seed = 3;
  const auto amounts = limitcounter::split(20'000'000, count, split_options);
  PacketOptions options;
  options.expires_at = Clock::now() + 1h;
  const std::string id = "pk-big";
  const std::string expires = std::to_string(
      std::chrono::duration_cast<std::chrono::milliseconds>(options.expires_at.time_since_epoch())
          .count());
  const std::string digest =
      limitcounter::detail::content_digest(amounts, expires, options.max_attempts_per_user);
  const std::vector<std::string> keys{pool.keys().packet(id, "meta"),
                                      pool.keys().packet(id, "list"),
                                      pool.keys().packets(pool.keys().partition_of(id))};
  const std::size_t per_chunk = RedPacketPool::chunk_amounts;
  const auto chunk = [&](std::size_t index) {
    std::vector<std::string> args{"chunk", id, digest, std::to_string(index)};
    for (std::size_t i = index * per_chunk; i < (index + 1) * per_chunk; ++i) {
      args.push_back(std::to_string(amounts[i]));
    }
    return redis.eval(limitcounter::scripts::red_packet, keys, args).at(0).as_string();
  };
  // A create cut off after its first chunks: the begin and chunks 0 and 1 ran (their replies
  // may have been lost), chunk 1 was even sent twice, and chunk 3 arrived before chunk 2.
  REQUIRE(redis
              .eval(limitcounter::scripts::red_packet, keys,
                    {"begin", id, "20000000", std::to_string(count), expires,
                     std::to_string(options.max_attempts_per_user),
                     std::to_string(std::stoll(expires) + 3'600'000), digest, "20",
                     std::to_string(std::stoll(expires) - 3'600'000)})
              .at(0)
              .as_string() == "begun");
  CHECK(chunk(0) == "stored");
  CHECK(chunk(1) == "stored");
  CHECK(chunk(1) == "have"); // the retried chunk is not pushed again
  CHECK(chunk(3) == "gap");  // nor one beyond what is stored
  CHECK(redis.command({"LLEN", keys[1]}).as_integer() == 2 * 10'000);

  // half stored: nobody can grab from it or close it
  const Error grab_error = limitcounter::testing::error_of([&] { pool.grab(id, "early"); });
  CHECK(grab_error.code() == errc::not_found);
  CHECK_THAT(grab_error.what(), Catch::Contains("not completely created"));
  CHECK(is_code(limitcounter::testing::error_of([&] { pool.close(id); }), errc::not_found));
  CHECK(pool.close_expired(Clock::now() + 2h).empty()); // not indexed before it is complete
  CHECK(redis.command({"HLEN", pool.keys().packet(id, "drawn")}).as_integer() == 0);

  // the host retries the create: the missing 18 chunks are stored, in order, once each
  const CreateResult finished = pool.create(id, amounts, options);
  CHECK(finished.created_now);
  CHECK(finished.replayed);
  CHECK(finished.chunks_stored == 18);
  const auto stored = redis.command({"LRANGE", keys[1], "0", "-1"}).as_array();
  REQUIRE(stored.size() == static_cast<std::size_t>(count));
  bool same = true;
  for (std::size_t i = 0; i < stored.size(); ++i) {
    same = same && stored[i].to_int64() == amounts[i];
  }
  CHECK(same);
  const CreateResult replay = pool.create(id, amounts, options);
  CHECK_FALSE(replay.created_now);
  CHECK(replay.replayed);
  CHECK(replay.chunks_stored == 0);
  CHECK(pool.grab(id, "first").amount == amounts[0]);

  // a fresh create of a large packet: 20 bounded commands after the begin
  const CreateResult fresh = pool.create("pk-big2", amounts, options);
  CHECK(fresh.created_now);
  CHECK(fresh.chunks_stored == 20);
  CHECK(redis.command({"LLEN", pool.keys().packet("pk-big2", "list")}).as_integer() == count);
}

TEST_CASE_METHOD(PoolFixture,
                 "a winner always gets already with the amount; the cap limits grabs that win "
                 "nothing",
                 "[redpacket][redis]") {
  PacketOptions options;
  options.max_attempts_per_user = 2;
  pool.create("pk-cap", {100}, options);
  const GrabResult won = pool.grab("pk-cap", "alice");
  REQUIRE(won.status == GrabResult::Status::granted);
  for (int i = 0; i < 5; ++i) { // past the cap, many times over
    const GrabResult again = pool.grab("pk-cap", "alice");
    CHECK(outcome(again) == std::pair(GrabResult::Status::granted, true));
    CHECK(again.amount == 100);
  }
  CHECK(pool.grab("pk-cap", "bob").status == GrabResult::Status::sold_out);
  CHECK(pool.grab("pk-cap", "bob").status == GrabResult::Status::sold_out);
  CHECK(pool.grab("pk-cap", "bob").status == GrabResult::Status::too_many_attempts);
  CHECK(pool.grab("pk-cap", "alice").amount == 100);
}

TEST_CASE_METHOD(PoolFixture, "a grab's display data is kept with the draw and the payout task",
                 "[redpacket][redis][payout]") {
  pool.create("pk-d", {5, 6, 7});
  const std::string nickname = "\xE5\xB0\x8F\xE6\x98\x8E:{x}"; // UTF-8, with separators
  const std::string avatar = "https://cdn.example/a/1.png?s=64:64";
  REQUIRE(pool.grab("pk-d", "u1", limitcounter::UserDisplay{nickname, avatar}).status ==
          GrabResult::Status::granted);
  REQUIRE(pool.grab("pk-d", "u2").status == GrabResult::Status::granted);
  CHECK_THAT(redis.command({"HGET", pool.keys().packet("pk-d", "drawn"), "u1"}).as_string(),
             Catch::Contains(nickname) && Catch::Contains(avatar));
  std::map<std::string, PayoutTask> tasks;
  for (const auto& task : take_all()) {
    tasks.emplace(task.user_id, task);
  }
  REQUIRE(tasks.size() == 2);
  CHECK(tasks["u1"].nickname == nickname);
  CHECK(tasks["u1"].avatar_url == avatar);
  CHECK(tasks["u1"].amount == 5);
  CHECK(tasks["u2"].nickname.empty());
  CHECK(tasks["u2"].avatar_url.empty());

  // refused before sending, naming the value: too long, control characters, not UTF-8
  const auto refused = [&](const limitcounter::UserDisplay& display, const std::string& needle) {
    const Error e = limitcounter::testing::error_of([&] { pool.grab("pk-d", "u3", display); });
    CHECK(e.code() == errc::invalid_argument);
    CHECK_THAT(e.what(), Catch::Contains(needle));
  };
  refused({std::string(257, 'n'), ""}, "257 bytes");
  refused({"", std::string(300, 'a')}, "avatar URL of 300 bytes");
  refused({"bad\nname", ""}, "bad\\x0aname");
  refused({"\xff\xfe", ""}, "\\xff");
  // C1 controls, line separators and a lone CSI byte act on terminals: refused, named escaped
  refused({"x\xc2\x9b[2J", ""}, "\"x\\u009b[2J\" contains a control character (U+009B");
  refused({"next\xc2\x85line", ""}, "\"next\\u0085line\" contains a control character");
  refused({"", "https://a.example/\xe2\x80\xa8"}, "contains a line separator (U+2028");
  refused({"x\x9b[2J", ""}, "\"x\\x9b[2J\" is not valid UTF-8");
  // an id with a no-break space looks like another user's: refused
  const Error look_alike = limitcounter::testing::error_of([&] {
    pool.grab("pk-d", "u3\xc2\xa0", {"u3", ""});
  });
  CHECK_THAT(look_alike.what(), Catch::Contains("\"u3\\u00a0\" contains whitespace (U+00A0"));
  CHECK(redis.command({"LLEN", pool.keys().packet("pk-d", "list")}).as_integer() == 1);
  CHECK(redis.command({"HEXISTS", pool.keys().packet("pk-d", "drawn"), "u3"}).as_integer() == 0);
}

TEST_CASE_METHOD(PoolFixture, "grab_many: one result per grab, an error stays with its grab",
                 "[redpacket][redis][batch]") {
  // every grab of an unknown packet fails alone: the batch returns, it does not throw
  const auto unknown = pool.grab_many("pk-none", {"a", "b"});
  REQUIRE(unknown.size() == 2);
  for (const auto& result : unknown) {
    REQUIRE(std::holds_alternative<Error>(result));
    CHECK(std::get<Error>(result).code() == errc::not_found);
  }
  pool.create("pk-m", {1, 2});
  std::vector<limitcounter::GrabRequest> requests{{"a", {"Ann", ""}}, {"b", {}}, {"a", {}}};
  const auto results = pool.grab_many("pk-m", requests);
  REQUIRE(results.size() == 3);
  CHECK(outcome(std::get<GrabResult>(results[0])) == std::pair(GrabResult::Status::granted, false));
  CHECK(outcome(std::get<GrabResult>(results[1])) == std::pair(GrabResult::Status::granted, false));
  CHECK(outcome(std::get<GrabResult>(results[2])) == std::pair(GrabResult::Status::granted, true));
  CHECK(std::get<GrabResult>(results[2]).amount == std::get<GrabResult>(results[0]).amount);
  // bad input throws before anything is sent
  pool.create("pk-m2", {1, 2});
  CHECK(is_code(limitcounter::testing::error_of([&] {
                  pool.grab_many("pk-m2", {"ok", "b:d"});
                }),
                errc::invalid_argument));
  CHECK(redis.command({"LLEN", pool.keys().packet("pk-m2", "list")}).as_integer() == 2);
}

TEST_CASE_METHOD(PoolFixture, "close retried returns the same leftover, marked as a replay",
                 "[redpacket][redis][exactly-once]") {
  pool.create("pk-cl", {10, 20, 30});
  REQUIRE(pool.grab("pk-cl", "u1").amount == 10);
  const CloseResult first = pool.close("pk-cl");
  CHECK(first.closed_now);
  CHECK_FALSE(first.replayed);
  CHECK(first.leftover == 50);
  CHECK(first.packets_left == 2);
  for (int i = 0; i < 2; ++i) { // the host retries: its first reply was lost
    const CloseResult again = pool.close("pk-cl");
    CHECK_FALSE(again.closed_now);
    CHECK(again.replayed);
    CHECK(again.leftover == 50);
    CHECK(again.packets_left == 2);
  }
  CHECK(redis.command({"HGET", pool.keys().packet("pk-cl", "meta"), "leftover"}).as_string() ==
        "50");
  CHECK(pool.grab("pk-cl", "u2").status == GrabResult::Status::expired);
}

TEST_CASE_METHOD(PoolFixture,
                 "close_expired skips a packet whose keys outlived their retention and closes "
                 "every other",
                 "[redpacket][redis]") {
  PacketOptions options;
  options.expires_at = Clock::now() + 1h;
  for (const char* id : {"pk-e1", "pk-e2", "pk-e3"}) {
    pool.create(id, {4, 5}, options);
  }
  // pk-e2 was never closed and its retention passed: its keys expired, its index entry stayed
  redis.command({"DEL", pool.keys().packet("pk-e2", "meta")});
  redis.command({"DEL", pool.keys().packet("pk-e2", "list")});
  auto closed = pool.close_expired(Clock::now() + 2h);
  std::sort(closed.begin(), closed.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  REQUIRE(closed.size() == 3);
  CHECK(closed[0].first == "pk-e1");
  CHECK(closed[0].second.closed_now);
  CHECK(closed[0].second.leftover == 9);
  CHECK(closed[1].first == "pk-e2");
  CHECK(closed[1].second.gone);
  CHECK_FALSE(closed[1].second.closed_now);
  CHECK(closed[2].first == "pk-e3");
  CHECK(closed[2].second.closed_now);
  CHECK(closed[2].second.leftover == 9);
  CHECK(pool.close_expired(Clock::now() + 3h).empty()); // the gone one does not come back
}

TEST_CASE("close_expired closes every expired packet of a partition, past one page of the index",
          "[redpacket][redis]") {
  Redis redis{test_options()};
  RedPacketOptions options = PoolFixture::options();
  options.partitions = 1; // every packet in one index
  RedPacketPool pool{redis, options};
  const std::size_t expired = 2 * RedPacketPool::close_page + 1; // three pages
  const TimePoint expiry = Clock::now() + 1h;
  PacketOptions soon;
  soon.expires_at = expiry;
  for (std::size_t i = 0; i < expired; ++i) {
    pool.create("pg-" + std::to_string(i), {3, 4}, soon);
  }
  PacketOptions later;
  later.expires_at = expiry + 2h;
  pool.create("pg-later", {5}, later);
  REQUIRE(pool.grab("pg-0", "alice").status == GrabResult::Status::granted);

  const auto closed = pool.close_expired(expiry + 1h);
  REQUIRE(closed.size() == expired);
  std::set<std::string> ids;
  std::int64_t leftover = 0;
  for (const auto& [id, result] : closed) {
    ids.insert(id);
    CHECK(result.closed_now);
    leftover += result.leftover;
  }
  CHECK(ids.size() == expired); // each once
  CHECK(ids.count("pg-later") == 0);
  CHECK(leftover == 7 * static_cast<std::int64_t>(expired) - pool.grab("pg-0", "alice").amount);
  // the server's side: only the packet not expired yet is left in the index
  const Reply index = redis.command({"ZRANGE", pool.keys().packets(0), "0", "-1"});
  REQUIRE(index.as_array().size() == 1);
  CHECK(index.at(0).as_string() == "pg-later");
  CHECK(pool.status("pg-" + std::to_string(expired - 1))->closed);
  CHECK(pool.close_expired(expiry + 1h).empty());
}

TEST_CASE_METHOD(PoolFixture,
                 "payout amounts from 10^14 to 2^53 - 1 stay exact through take, fail and "
                 "dead letter",
                 "[redpacket][redis][payout]") {
  constexpr std::int64_t max_exact = (std::int64_t{1} << 53) - 1;
  constexpr std::int64_t big = 100'000'000'000'001; // 10^14 + 1: %.14g gives 1e+14
  pool.create("pk-x", {max_exact - big, big});
  REQUIRE(pool.grab("pk-x", "u1").amount == max_exact - big);
  REQUIRE(pool.grab("pk-x", "u2").amount == big);
  const auto partition = pool.keys().partition_of("pk-x");
  auto now = Clock::now();
  for (int attempt = 1; attempt <= 3; ++attempt) {
    const auto tasks = pool.take_payouts(partition, 10, now);
    REQUIRE(tasks.size() == 2);
    for (const auto& task : tasks) {
      CHECK(task.attempt == attempt);
      CHECK(task.amount == (task.user_id == "u1" ? max_exact - big : big));
      CHECK(pool.fail_payout(task, now) == (attempt == 3));
    }
    now += 1s; // past the back-off
  }
  auto dead = pool.dead_payouts(partition);
  std::sort(dead.begin(), dead.end());
  CHECK(dead == std::vector<std::string>{"pk-x:u1:" + std::to_string(max_exact - big) + ":3",
                                         "pk-x:u2:" + std::to_string(big) + ":3"});
  pool.create("pk-y", {max_exact});
  REQUIRE(pool.grab("pk-y", "u1").amount == max_exact);
  const auto task = pool.take_payouts(pool.keys().partition_of("pk-y"), 10, now);
  REQUIRE(task.size() == 1);
  CHECK(task[0].amount == max_exact);
}

TEST_CASE_METHOD(PoolFixture,
                 "ack and fail apply once across retries; a worker whose lease ran out cannot "
                 "ack a task another worker holds",
                 "[redpacket][redis][payout][exactly-once]") {
  pool.create("pk-a", {11, 12});
  REQUIRE(pool.grab("pk-a", "u1").status == GrabResult::Status::granted);
  const auto partition = pool.keys().partition_of("pk-a");
  const auto start = Clock::now();
  const auto a_tasks = pool.take_payouts(partition, 10, start); // worker A
  REQUIRE(a_tasks.size() == 1);
  // A's lease runs out; worker B takes the task under a new lease
  const auto b_tasks = pool.take_payouts(partition, 10, start + 1s);
  REQUIRE(b_tasks.size() == 1);
  CHECK(b_tasks[0].lease != a_tasks[0].lease);
  CHECK(b_tasks[0].attempt == 2);
  CHECK_FALSE(pool.ack_payout(a_tasks[0], start + 1s));  // A is refused
  CHECK_FALSE(pool.fail_payout(a_tasks[0], start + 1s)); // and cannot fail it either
  CHECK(pool.ack_payout(b_tasks[0], start + 1s));        // B's ack counts
  CHECK(pool.ack_payout(b_tasks[0], start + 1s));        // and B's retried ack too
  CHECK_FALSE(pool.ack_payout(a_tasks[0], start + 2s));
  CHECK(redis.command({"HLEN", pool.keys().packet("pk-a", "paid")}).as_integer() == 1);
  CHECK(pool.take_payouts(partition, 10, start + 1h).empty()); // paid once, never again

  // a retried fail counts one failed attempt, and answers as the first one did
  REQUIRE(pool.grab("pk-a", "u2").status == GrabResult::Status::granted);
  auto now = start + 2h;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    const auto tasks = pool.take_payouts(partition, 10, now);
    REQUIRE(tasks.size() == 1);
    CHECK(tasks[0].attempt == attempt);
    const bool dead = pool.fail_payout(tasks[0], now);
    CHECK(dead == (attempt == 3));
    CHECK(pool.fail_payout(tasks[0], now) == dead);
    now += 1s;
  }
  CHECK(pool.dead_payouts(partition) == std::vector<std::string>{"pk-a:u2:12:3"});
}

namespace {

std::string millis_of(TimePoint at) {
  return std::to_string(
      std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch()).count());
}

// A payout task as its partition's keys hold it: the tasks hash entry
// "<amount>:<attempts>:<lease>[:<display>]" and its scores in ready and inflight ("" if absent).
struct QueuedTask {
  std::string entry, ready, inflight;
  bool operator==(const QueuedTask& other) const {
    return std::tie(entry, ready, inflight) == std::tie(other.entry, other.ready, other.inflight);
  }
};

QueuedTask queued(Redis& redis, const RedPacketPool& pool, const PayoutTask& task) {
  const auto read = [&](std::vector<std::string> command) {
    const Reply reply = redis.command(command);
    return reply.is_nil() ? std::string() : reply.as_string();
  };
  const std::string id = task.idempotency_key();
  return {read({"HGET", pool.keys().payout(task.partition, "tasks"), id}),
          read({"ZSCORE", pool.keys().payout(task.partition, "ready"), id}),
          read({"ZSCORE", pool.keys().payout(task.partition, "inflight"), id})};
}

} // namespace

TEST_CASE_METHOD(PoolFixture,
                 "a released payout is due again at once with its attempts and lease; its retry "
                 "replays; a stale lease releases nothing",
                 "[redpacket][redis][payout][exactly-once]") {
  pool.create("pk-r", {21, 22});
  REQUIRE(pool.grab("pk-r", "u1").status == GrabResult::Status::granted);
  const auto partition = pool.keys().partition_of("pk-r");
  const auto start = Clock::now();
  const auto taken = pool.take_payouts(partition, 10, start);
  REQUIRE(taken.size() == 1);
  const std::string entry = queued(redis, pool, taken[0]).entry;
  CHECK(entry == std::to_string(taken[0].amount) + ":0:" + std::to_string(taken[0].lease));

  CHECK(pool.release_payout(taken[0], start + 5ms));
  const QueuedTask released{entry, millis_of(start + 5ms), ""};
  CHECK(queued(redis, pool, taken[0]) == released);
  // a retry after a lost reply answers as the first call; it, and the released lease's ack and
  // fail, change nothing
  CHECK(pool.release_payout(taken[0], start + 10ms));
  CHECK_FALSE(pool.ack_payout(taken[0], start + 10ms));
  CHECK_FALSE(pool.fail_payout(taken[0], start + 10ms));
  CHECK(queued(redis, pool, taken[0]) == released);
  CHECK(redis.command({"EXISTS", pool.keys().packet("pk-r", "paid")}).as_integer() == 0);

  // the next take leases it anew, for the same attempt
  const auto again = pool.take_payouts(partition, 10, start + 10ms);
  REQUIRE(again.size() == 1);
  CHECK(again[0].attempt == 1);
  CHECK(again[0].lease == taken[0].lease + 1);
  // its lease runs out and another worker takes it: the late release changes nothing
  const auto other = pool.take_payouts(partition, 10, start + 1s);
  REQUIRE(other.size() == 1);
  const QueuedTask held = queued(redis, pool, other[0]);
  CHECK_FALSE(pool.release_payout(again[0], start + 1s));
  CHECK(queued(redis, pool, other[0]) == held);
  CHECK(pool.ack_payout(other[0], start + 1s));
  CHECK_FALSE(pool.release_payout(other[0], start + 1s)); // paid: nothing to hand back
  CHECK(queued(redis, pool, other[0]) == QueuedTask{});
  // the released lease, retried after the task was paid: its marker went with the task
  CHECK_FALSE(pool.release_payout(taken[0], start + 1s));
  CHECK(redis.command({"HLEN", pool.keys().payout(partition, "tasks")}).as_integer() == 0);
}

TEST_CASE_METHOD(PoolFixture,
                 "ack fail and release of a task of a partition past the pool's throw before "
                 "sending",
                 "[redpacket][redis][payout][bad_input]") {
  pool.create("pk-b", {21});
  REQUIRE(pool.grab("pk-b", "u1").status == GrabResult::Status::granted);
  const auto partition = pool.keys().partition_of("pk-b");
  const auto taken = pool.take_payouts(partition, 10);
  REQUIRE(taken.size() == 1);
  const QueuedTask held = queued(redis, pool, taken[0]);
  PayoutTask outside = taken[0];
  outside.partition = pool.keys().partitions();
  const std::string named = "partition " + std::to_string(outside.partition);
  const auto refused = [&named](const std::function<void()>& call) {
    try {
      call();
    } catch (const Error& e) {
      CHECK(e.code() == errc::invalid_argument);
      CHECK_THAT(e.what(), Catch::Contains(named));
      return;
    }
    FAIL("no error for " << named);
  };
  refused([&] { pool.ack_payout(outside); });
  refused([&] { pool.fail_payout(outside); });
  refused([&] { pool.release_payout(outside); });
  CHECK(queued(redis, pool, taken[0]) == held);
  CHECK(redis.command({"EXISTS", pool.keys().packet("pk-b", "paid")}).as_integer() == 0);
  CHECK(pool.ack_payout(taken[0])); // the task itself, as taken, is still its worker's
}

TEST_CASE("run_payouts whose ack throws hands back the tasks of that pass it did not try",
          "[redpacket][redis][payout]") {
  Redis redis{test_options()};
  RedPacketOptions one = PoolFixture::options();
  one.partitions = 1;
  one.visibility_timeout = 1min; // the task whose ack threw stays held through the test
  RedPacketPool pool(redis, one);
  const auto start = Clock::now() - 1min;
  const std::vector<std::string> packets{"pk-1", "pk-2", "pk-3", "pk-4"};
  for (std::size_t i = 0; i < packets.size(); ++i) {
    pool.create(packets[i], {30 + static_cast<std::int64_t>(i)});
    // due one after the other: the take leases them in this order
    REQUIRE(pool.grab(packets[i], "u", start + std::chrono::seconds(i)).status ==
            GrabResult::Status::granted);
  }

  std::vector<PayoutTask> tried;
  const auto before = Clock::now();
  const Error e = limitcounter::testing::error_of([&] {
    pool.run_payouts([&](const PayoutTask& task) {
      tried.push_back(task);
      if (task.packet_id == "pk-2") {
        // this task's ack fails: its packet's paid hash is no hash (release does not touch it)
        redis.command({"SET", pool.keys().packet("pk-2", "paid"), "not a hash"});
      }
      return true;
    });
  });
  const auto after = Clock::now();
  CHECK(e.code() == errc::server_error);
  CHECK_THAT(e.what(), Catch::Contains("WRONGTYPE"));
  REQUIRE(tried.size() == 2);
  CHECK(tried[0].packet_id == "pk-1");
  CHECK(tried[1].packet_id == "pk-2");

  // from the server's side: pk-1 paid; pk-2 still held under its lease (the ack wrote nothing);
  // pk-3 and pk-4 back in ready, due between the call's start and end, attempts unchanged
  CHECK(redis.command({"HEXISTS", pool.keys().packet("pk-1", "paid"), "u"}).as_integer() == 1);
  const QueuedTask failing = queued(redis, pool, tried[1]);
  CHECK(failing.entry == "31:0:" + std::to_string(tried[1].lease));
  CHECK(failing.ready.empty());
  CHECK_FALSE(failing.inflight.empty());
  for (const auto& [packet, amount] : {std::pair("pk-3", "32"), std::pair("pk-4", "33")}) {
    PayoutTask untried;
    untried.packet_id = packet;
    untried.user_id = "u";
    const QueuedTask state = queued(redis, pool, untried);
    CHECK_THAT(state.entry, Catch::StartsWith(std::string(amount) + ":0:"));
    CHECK(state.inflight.empty());
    REQUIRE_FALSE(state.ready.empty());
    CHECK(std::stoll(state.ready) >= std::stoll(millis_of(before)));
    CHECK(std::stoll(state.ready) <= std::stoll(millis_of(after)));
  }
  // the next pass pays them as their first attempt
  std::vector<int> attempts;
  CHECK(pool.run_payouts([&](const PayoutTask& task) {
    attempts.push_back(task.attempt);
    return true;
  }) == 2);
  CHECK(attempts == std::vector<int>{1, 1});
}

TEST_CASE_METHOD(PoolFixture,
                 "calls timed out while Redis held writes did not run; the same call again "
                 "applies once",
                 "[redpacket][redis][exactly-once][standalone]") {
  RedisOptions short_options = test_options();
  short_options.command_timeout = 100ms;
  short_options.retry.max_attempts = 1; // each call times out once: the host's retry is `b`
  Redis impatient(short_options);
  Redis admin(test_options());
  PacketOptions packet;
  packet.expires_at = Clock::now() + 1h;
  const auto times_out = [&](const std::function<void()>& call) {
    const limitcounter::testing::WritesHeld held(admin, 2000ms);
    const Error e = limitcounter::testing::error_of(call);
    CHECK(e.code() == errc::timeout);
    CHECK(e.outcome() == limitcounter::Outcome::unknown);
  };
  // one key prefix: `a` times out, `b` is the host's retry
  const RedPacketOptions shared = options();
  RedPacketPool a(impatient, shared);
  RedPacketPool b(redis, shared);
  const std::string a_meta = a.keys().packet("pk-t", "meta");

  times_out([&] { a.create("pk-t", {3, 4}, packet); });
  CHECK(redis.command({"EXISTS", a_meta}).as_integer() == 0); // it did not run
  CHECK(b.create("pk-t", {3, 4}, packet).created_now);
  CHECK(b.create("pk-t", {3, 4}, packet).replayed);

  times_out([&] { a.grab("pk-t", "u1"); });
  CHECK(redis.command({"LLEN", a.keys().packet("pk-t", "list")}).as_integer() == 2);
  CHECK(outcome(b.grab("pk-t", "u1")) == std::pair(GrabResult::Status::granted, false));
  CHECK(outcome(b.grab("pk-t", "u1")) == std::pair(GrabResult::Status::granted, true));

  const auto tasks = b.take_payouts(b.keys().partition_of("pk-t"), 10);
  REQUIRE(tasks.size() == 1);
  times_out([&] { a.ack_payout(tasks[0]); });
  CHECK(redis.command({"EXISTS", b.keys().packet("pk-t", "paid")}).as_integer() == 0);
  CHECK(b.ack_payout(tasks[0]));
  CHECK(b.ack_payout(tasks[0]));

  times_out([&] { a.close("pk-t"); });
  CHECK(redis.command({"HGET", a_meta, "closed"}).as_string() == "0");
  const CloseResult closed = b.close("pk-t");
  CHECK(closed.closed_now);
  CHECK(closed.leftover == 4);
  const CloseResult replay = b.close("pk-t");
  CHECK(replay.replayed);
  CHECK(replay.leftover == 4);
}
