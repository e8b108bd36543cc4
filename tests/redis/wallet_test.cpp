#include <catch2/catch.hpp>

#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include <limitcounter/error.hpp>
#include <limitcounter/journal_consumer.hpp>
#include <limitcounter/usage.hpp>
#include <limitcounter/wallet.hpp>

#include "support/outcome.hpp"
#include "support/probe.hpp"
#include "support/redis_server.hpp"
#include "support/topology.hpp"

using namespace std::chrono_literals;
using limitcounter::AccountSnapshot;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::JournalConsumer;
using limitcounter::JournalConsumerOptions;
using limitcounter::JournalEvent;
using limitcounter::Redis;
using limitcounter::RollbackResult;
using limitcounter::Wallet;
using limitcounter::WalletOptions;
using limitcounter::WalletResult;
using limitcounter::testing::error_of;
using limitcounter::testing::outcome;
using limitcounter::testing::test_options;
using limitcounter::testing::unique_prefix;

namespace {

struct WalletFixture {
  Redis redis{test_options()};
  WalletOptions options = make_options();
  Wallet wallet{redis, options};

  static WalletOptions make_options() {
    WalletOptions o;
    o.key_prefix = unique_prefix() + "wallet:";
    o.partitions = 4;
    return o;
  }
  std::int64_t journal_length(const std::string& user) {
    return redis.command({"XLEN", wallet.keys().journal(wallet.keys().partition_of(user))})
        .as_integer();
  }
  std::vector<std::string> all_keys() {
    std::vector<std::string> names;
    for (const auto& key : limitcounter::testing::keys_matching(options.key_prefix + "*")) {
      names.push_back(key + "=" + redis.command({"DUMP", key}).debug_string());
    }
    return names;
  }
};

} // namespace

TEST_CASE_METHOD(WalletFixture, "64 threads deduct from one user: exact, never below the threshold",
                 "[wallet][redis][concurrency]") {
  REQUIRE(wallet.load("alice", AccountSnapshot{100'000, 7, -5'000}));
  std::mutex mutex;
  std::map<std::string, std::int64_t> accepted; // order -> amount
  std::set<std::string> denied;
  std::vector<std::int64_t> versions;
  std::vector<std::thread> threads;
  for (int t = 0; t < 64; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 random(static_cast<unsigned>(t));
      for (int i = 0; i < 10; ++i) {
        const std::string order = "o-" + std::to_string(t) + "-" + std::to_string(i);
        const std::int64_t amount = 1 + static_cast<std::int64_t>(random() % 400);
        const WalletResult result = wallet.deduct("alice", order, amount);
        const std::lock_guard<std::mutex> lock(mutex);
        if (result.status == WalletResult::Status::ok) {
          accepted.emplace(order, amount);
          versions.push_back(result.version);
          CHECK(result.balance >= -5'000);
        } else {
          CHECK(result.status == WalletResult::Status::insufficient);
          denied.insert(order);
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  std::int64_t taken = 0;
  for (const auto& entry : accepted) {
    taken += entry.second;
  }
  const auto account = wallet.account("alice");
  REQUIRE(account);
  CHECK(account->balance == 100'000 - taken);
  CHECK(account->balance >= -5'000);
  CHECK(!denied.empty()); // the threshold was reached
  std::sort(versions.begin(), versions.end());
  for (std::size_t i = 0; i < versions.size(); ++i) {
    REQUIRE(versions[i] == 8 + static_cast<std::int64_t>(i)); // contiguous
  }
  CHECK(account->version == 7 + static_cast<std::int64_t>(accepted.size()));
  CHECK(journal_length("alice") == static_cast<std::int64_t>(accepted.size()));
  const auto pending = redis.command({"ZCARD", wallet.keys().user_pending("alice")}).as_integer();
  CHECK(pending == static_cast<std::int64_t>(accepted.size()));
  for (const auto& [order, amount] : accepted) {
    REQUIRE(redis.command({"HGET", wallet.keys().order("alice", order), "amount"}).as_string() ==
            std::to_string(amount));
  }
  for (const auto& order : denied) {
    REQUIRE(redis.command({"EXISTS", wallet.keys().order("alice", order)}).as_integer() == 0);
  }
}

TEST_CASE_METHOD(WalletFixture, "retries, rollbacks, stale loads and bad input",
                 "[wallet][redis]") {
  REQUIRE(wallet.load("bob", AccountSnapshot{1'000, 3, 0}));
  CHECK_FALSE(wallet.load("bob", AccountSnapshot{50, 2, 0})); // stale: ignored
  CHECK_FALSE(wallet.load("bob", AccountSnapshot{50, 3, 0})); // same version: ignored
  CHECK(wallet.account("bob")->balance == 1'000);

  const WalletResult first = wallet.deduct("bob", "pay-1", 300);
  CHECK(first.status == WalletResult::Status::ok);
  CHECK(first.balance == 700);
  CHECK(first.version == 4);
  const WalletResult retry = wallet.deduct("bob", "pay-1", 300);
  CHECK(retry.replayed);
  CHECK(retry.balance == 700);
  CHECK(retry.event_id == first.event_id);
  CHECK(wallet.account("bob")->balance == 700);
  CHECK_THROWS_MATCHES(
      wallet.deduct("bob", "pay-1", 301), Error,
      Catch::Predicate<Error>([](const Error& e) { return e.code() == errc::conflict; }));

  CHECK(outcome(wallet.rollback("bob", "pay-1")) ==
        std::pair(RollbackResult::Status::rolled_back, false));
  CHECK(outcome(wallet.rollback("bob", "pay-1")) ==
        std::pair(RollbackResult::Status::rolled_back, true));
  CHECK(wallet.account("bob")->balance == 1'000);
  CHECK(wallet.account("bob")->version == 5);
  CHECK_THROWS_AS(wallet.deduct("bob", "pay-1", 300), Error); // a late retry after rollback
  CHECK(wallet.account("bob")->balance == 1'000);
  CHECK(outcome(wallet.rollback("bob", "never-paid")) ==
        std::pair(RollbackResult::Status::recorded_unknown, false));
  CHECK_THROWS_AS(wallet.deduct("bob", "never-paid", 5), Error);

  const WalletResult top_up = wallet.credit("bob", "topup-1", 500);
  CHECK(top_up.balance == 1'500);
  CHECK(wallet.credit("bob", "topup-1", 500).replayed);
  CHECK(journal_length("bob") == 3); // deduct, rollback, credit

  // bad input writes nothing at all
  const auto before = all_keys();
  CHECK_THROWS_AS(wallet.deduct("bob", "x", 0), Error);
  CHECK_THROWS_AS(wallet.deduct("bob", "x", -5), Error);
  CHECK_THROWS_MATCHES(
      wallet.deduct("bob", "x", std::int64_t{1} << 53), Error,
      Catch::Predicate<Error>([](const Error& e) { return e.code() == errc::precision_overflow; }));
  CHECK_THROWS_AS(wallet.deduct("b ob", "x", 5), Error);
  CHECK_THROWS_AS(wallet.deduct("bob", "x{y}", 5), Error);
  CHECK(wallet.deduct("nobody", "x", 5).status == WalletResult::Status::not_loaded);
  CHECK(wallet.deduct("bob", "too-much", 10'000).status == WalletResult::Status::insufficient);
  CHECK(all_keys() == before);
}

TEST_CASE_METHOD(WalletFixture, "concurrent misses call the loader once", "[wallet][redis]") {
  std::atomic<int> loads{0};
  Wallet loading(redis, options, [&](const std::string& user) -> std::optional<AccountSnapshot> {
    ++loads;
    std::this_thread::sleep_for(50ms); // a slow database
    return user == "carol" ? std::optional<AccountSnapshot>(AccountSnapshot{10'000, 1, 0})
                           : std::nullopt;
  });
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      ok +=
          loading.deduct("carol", "c-" + std::to_string(t), 100).status == WalletResult::Status::ok;
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  CHECK(loads == 1);
  CHECK(ok == 16);
  CHECK(loading.account("carol")->balance == 10'000 - 1'600);
  CHECK(loading.deduct("ghost", "g-1", 1).status == WalletResult::Status::not_loaded);
}

TEST_CASE_METHOD(WalletFixture, "a crashed persister's events are reclaimed; each order lands once",
                 "[wallet][redis][persister]") {
  for (const char* user : {"u1", "u2", "u3", "u4", "u5"}) {
    REQUIRE(wallet.load(user, AccountSnapshot{1'000, 1, 0}));
    for (int i = 0; i < 4; ++i) {
      REQUIRE(wallet.deduct(user, std::string(user) + "-o" + std::to_string(i), 10).status ==
              WalletResult::Status::ok);
    }
  }
  std::map<std::string, int> database; // "<type>:<order>" -> times written (idempotent by event id)
  std::set<std::string> seen_events;
  const auto persist = [&](const std::vector<JournalEvent>& events) {
    for (const auto& event : events) {
      if (seen_events.insert(event.id).second) {
        ++database[event.type + ":" + event.order];
      }
    }
  };

  JournalConsumerOptions crashed_options;
  crashed_options.consumer = "crashed";
  crashed_options.claim_idle = 200ms;
  JournalConsumer crashed(redis, options, crashed_options);
  std::size_t read_before_crash = 0;
  for (std::uint32_t p = 0; p < options.partitions; ++p) {
    read_before_crash += crashed.read(p).size(); // read, never acknowledged: it "dies"
  }
  CHECK(read_before_crash == 20);

  JournalConsumerOptions survivor_options;
  survivor_options.consumer = "survivor";
  survivor_options.claim_idle = 200ms;
  JournalConsumer survivor(redis, options, survivor_options);
  CHECK(survivor.poll(persist) == 0); // nothing new, and the lost events are not idle long enough
  std::this_thread::sleep_for(300ms);
  CHECK(survivor.poll(persist) == 20);
  CHECK(survivor.poll(persist) == 0);

  CHECK(database.size() == 20);
  for (const auto& [order, times] : database) {
    CHECK(times == 1);
  }
  for (const char* user : {"u1", "u2", "u3", "u4", "u5"}) {
    CHECK(redis.command({"ZCARD", wallet.keys().user_pending(user)}).as_integer() == 0);
    CHECK(wallet.pending_orders(user, 0ms).empty());
  }
  for (std::uint32_t p = 0; p < options.partitions; ++p) {
    CHECK(wallet.stale_pending(p, 0ms).empty());
  }
  CHECK(wallet.compare("u1", 960, 5).matches);
  CHECK_FALSE(wallet.compare("u1", 960, 4).matches);
}

TEST_CASE_METHOD(WalletFixture, "deduct_many: one result per order; misses loaded once, then sent",
                 "[wallet][redis][batch]") {
  std::atomic<int> loads{0};
  Wallet loading(redis, options, [&](const std::string& user) -> std::optional<AccountSnapshot> {
    ++loads;
    if (user == "broken") {
      throw std::runtime_error("database down");
    }
    return user == "dave" ? std::optional<AccountSnapshot>(AccountSnapshot{1'000, 1, 0})
                          : std::nullopt;
  });
  loading.load("erin", {500, 1, 100});
  REQUIRE(loading.deduct("erin", "e-0", 100).status == WalletResult::Status::ok);
  const std::vector<limitcounter::WalletOrder> orders{
      {"dave", "d-1", 300}, // not cached: loaded, then deducted
      {"erin", "e-1", 200}, // ok: 400 -> 200
      {"dave", "d-2", 600}, // after d-1: 700 -> 100
      {"erin", "e-2", 150}, // would leave 50 < threshold 100
      {"erin", "e-0", 100}, // a retry: the first result, nothing deducted
      {"erin", "e-0", 999}, // the same order with another amount
      {"ghost", "g-1", 1},  // nobody to load
      {"broken", "b-1", 1}, // the loader throws
      {"dave", "d-3", 200}, // after d-2: would leave -100
  };
  const auto results = loading.deduct_many(orders);
  REQUIRE(results.size() == orders.size());
  const auto result = [&](std::size_t i) { return std::get<WalletResult>(results[i]); };
  CHECK((result(0).status == WalletResult::Status::ok && result(0).balance == 700));
  CHECK((result(1).status == WalletResult::Status::ok && result(1).balance == 200));
  CHECK((result(2).status == WalletResult::Status::ok && result(2).balance == 100));
  CHECK((result(3).status == WalletResult::Status::insufficient && result(3).balance == 200));
  CHECK((result(4).replayed && result(4).balance == 400));
  REQUIRE(std::holds_alternative<Error>(results[5]));
  CHECK(std::get<Error>(results[5]).code() == errc::conflict);
  CHECK(result(6).status == WalletResult::Status::not_loaded);
  REQUIRE(std::holds_alternative<Error>(results[7]));
  CHECK_THAT(std::get<Error>(results[7]).what(), Catch::Contains("database down"));
  CHECK(result(8).status == WalletResult::Status::insufficient);
  CHECK(loads == 3); // dave, ghost and broken, once each
  CHECK(loading.account("dave")->balance == 100);
  CHECK(loading.account("erin")->balance == 200);

  // bad input anywhere: an error naming it, and nothing sent
  const auto before = all_keys();
  CHECK_THROWS_WITH(loading.deduct_many({{"erin", "e-3", 1}, {"erin", "e 4", 1}}),
                    Catch::Contains("e 4"));
  CHECK_THROWS_WITH(loading.deduct_many({{"erin", "e-3", 0}}), Catch::Contains("0"));
  CHECK(all_keys() == before);
}

TEST_CASE_METHOD(WalletFixture,
                 "deduct_many from 4 threads: exact; the same batches again move nothing",
                 "[wallet][redis][batch][concurrency]") {
  REQUIRE(wallet.load("frank", {1'000, 1, 0}));
  // 4 threads x 2 batches x 16 orders of 10 = 1,280 asked of 1,000: exactly 100 pass
  std::vector<std::vector<limitcounter::WalletOrder>> batches;
  for (int b = 0; b < 8; ++b) {
    std::vector<limitcounter::WalletOrder> orders;
    for (int k = 0; k < 16; ++k) {
      orders.push_back({"frank", "f-" + std::to_string(b) + "-" + std::to_string(k), 10});
    }
    batches.push_back(std::move(orders));
  }
  const auto run_all = [&](std::atomic<int>& ok, std::atomic<int>& replayed) {
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int b = 2 * t; b < 2 * t + 2; ++b) {
          for (const auto& result : wallet.deduct_many(batches[static_cast<std::size_t>(b)])) {
            const auto& value = std::get<WalletResult>(result);
            ok += value.status == WalletResult::Status::ok && !value.replayed ? 1 : 0;
            replayed += value.replayed ? 1 : 0;
          }
        }
      });
    }
    for (auto& thread : threads) {
      thread.join();
    }
  };
  std::atomic<int> ok{0};
  std::atomic<int> replayed{0};
  run_all(ok, replayed);
  CHECK(ok == 100);
  CHECK(replayed == 0);
  CHECK(wallet.account("frank")->balance == 0);
  CHECK(journal_length("frank") == 100); // one event per deduction

  // every batch sent again (a retry after Outcome::unknown): the 100 replay, nothing moves
  std::atomic<int> ok_again{0};
  std::atomic<int> replayed_again{0};
  run_all(ok_again, replayed_again);
  CHECK(ok_again == 0);
  CHECK(replayed_again == 100);
  CHECK(wallet.account("frank")->balance == 0);
  CHECK(journal_length("frank") == 100);
}

namespace {

/// A private server with DEBUG enabled, to lose replies for real: while it sleeps in
/// `DEBUG SLEEP`, a call is sent and times out on the client (Outcome::unknown); when the
/// server wakes it reads the call from the closed connection and runs it.
struct LostReplyFixture {
  limitcounter::testing::RedisServer server{{"--enable-debug-command", "yes"}};
  Redis admin{server.options()};
  Redis fast{fast_options()};
  WalletOptions options = WalletFixture::make_options();
  Wallet wallet{fast, options};

  limitcounter::RedisOptions fast_options() const {
    limitcounter::RedisOptions o = server.options();
    o.command_timeout = 100ms;
    o.breaker_failures = 1000; // the timeouts below are wanted
    return o;
  }

  /// Runs `call` while the server sleeps; requires it to end in Outcome::unknown.
  template <typename Call> void lose_reply(Call call) {
    Redis sleeper_redis(server.options());
    std::thread sleeper([&] { sleeper_redis.command({"DEBUG", "SLEEP", "1"}); });
    limitcounter::RedisOptions probe_options = server.options();
    probe_options.command_timeout = 20ms;
    probe_options.breaker_failures = 1000;
    Redis probe(probe_options);
    for (bool asleep = false; !asleep;) { // until a PING goes unanswered
      try {
        probe.command({"PING"});
        std::this_thread::sleep_for(1ms);
      } catch (const Error&) {
        asleep = true;
      }
    }
    bool unknown = false;
    try {
      call();
    } catch (const Error& e) {
      unknown = e.outcome() == limitcounter::Outcome::unknown;
    } catch (...) { // anything else fails the REQUIRE below, after the sleeper is joined
    }
    sleeper.join();
    REQUIRE(unknown);
  }

  /// Waits until the server shows that a lost call ran: `key` has `field` equal to `value`.
  void await_field(const std::string& key, const std::string& field, const std::string& value) {
    for (int i = 0; i < 500; ++i) {
      const limitcounter::Reply reply = admin.command({"HGET", key, field});
      if (!reply.is_nil() && reply.as_string() == value) {
        return;
      }
      std::this_thread::sleep_for(10ms);
    }
    FAIL("the lost call never ran: " << key << " " << field << " != " << value);
  }
  std::int64_t journal_length(const std::string& user) {
    return admin.command({"XLEN", wallet.keys().journal(wallet.keys().partition_of(user))})
        .as_integer();
  }
};

} // namespace

TEST_CASE_METHOD(LostReplyFixture,
                 "lost replies: deduct, credit, rollback and deduct_many retried apply once",
                 "[wallet][redis][standalone][lost_reply]") {
  REQUIRE(wallet.load("lara", AccountSnapshot{1'000, 1, 0})); // also loads the script

  lose_reply([&] { wallet.deduct("lara", "d-1", 100); });
  await_field(wallet.keys().order("lara", "d-1"), "state", "done"); // it ran
  const WalletResult deduct = wallet.deduct("lara", "d-1", 100);
  CHECK(deduct.replayed);
  CHECK(deduct.balance == 900);
  CHECK(wallet.account("lara")->balance == 900);

  lose_reply([&] { wallet.credit("lara", "c-1", 50); });
  await_field(wallet.keys().order("lara", "c-1"), "state", "done");
  const WalletResult credit = wallet.credit("lara", "c-1", 50);
  CHECK(credit.replayed);
  CHECK(credit.balance == 950);

  lose_reply([&] { wallet.rollback("lara", "d-1"); });
  await_field(wallet.keys().order("lara", "d-1"), "state", "rolled_back");
  CHECK(outcome(wallet.rollback("lara", "d-1")) ==
        std::pair(RollbackResult::Status::rolled_back, true)); // never reversed twice
  CHECK(wallet.account("lara")->balance == 1'050);

  const std::vector<limitcounter::WalletOrder> batch{{"lara", "m-1", 10}, {"lara", "m-2", 20}};
  lose_reply([&] { wallet.deduct_many(batch); });
  await_field(wallet.keys().order("lara", "m-2"), "state", "done");
  const auto again = wallet.deduct_many(batch);
  CHECK(std::get<WalletResult>(again[0]).replayed);
  CHECK(std::get<WalletResult>(again[1]).replayed);
  CHECK(std::get<WalletResult>(again[1]).balance == 1'020);

  const auto account = wallet.account("lara");
  CHECK(account->balance == 1'020);
  CHECK(account->version == 6); // deduct, credit, rollback, two deducts
  CHECK(journal_length("lara") == 5);
}

TEST_CASE_METHOD(WalletFixture, "rollback refuses a balance past 2^53 - 1 before writing",
                 "[wallet][redis]") {
  constexpr std::int64_t max = limitcounter::max_exact_integer;
  REQUIRE(wallet.load("rich", AccountSnapshot{max - 50, 1, 0}));
  REQUIRE(wallet.deduct("rich", "d-1", 100).balance == max - 150);
  REQUIRE(wallet.credit("rich", "c-1", 150).balance == max);
  const auto before = all_keys();
  CHECK_THROWS_MATCHES(
      wallet.rollback("rich", "d-1"), Error, Catch::Predicate<Error>([](const Error& e) {
        return e.code() == errc::precision_overflow &&
               std::string(e.what()).find("9007199254740991") != std::string::npos &&
               std::string(e.what()).find("100") != std::string::npos;
      }));
  CHECK(all_keys() == before);
  CHECK(wallet.account("rich")->balance == max);
}

// The account hash lost (deleted, or evicted on a server that allows it) while a deduct is not
// yet persisted: the system of record still has the balance before it. Loading that snapshot
// would give the deducted money back to be spent again; the load is refused until the persister
// has written the deduct.
TEST_CASE_METHOD(WalletFixture,
                 "a reload never goes back before a deduct the persister has not written",
                 "[wallet][redis]") {
  AccountSnapshot in_database{1'000, 1, 0};
  Wallet loading(redis, options,
                 [&](const std::string&) -> std::optional<AccountSnapshot> { return in_database; });
  REQUIRE(loading.deduct("nell", "d-1", 300).balance == 700);
  REQUIRE(redis.command({"DEL", loading.keys().account("nell")}).as_integer() == 1);

  const auto before = all_keys();
  const Error refused = error_of([&] { loading.deduct("nell", "d-2", 1'000); });
  CHECK(refused.code() == errc::conflict);
  CHECK(refused.outcome() == limitcounter::Outcome::failed);
  CHECK_THAT(refused.what(), Catch::Contains("version 1") && Catch::Contains("version 2"));
  CHECK(all_keys() == before); // nothing loaded, nothing deducted
  CHECK_FALSE(loading.account("nell"));
  CHECK(journal_length("nell") == 1);
  // the host's own load of that snapshot is refused the same way
  CHECK(error_of([&] { loading.load("nell", in_database); }).code() == errc::conflict);

  // the persister writes the deduct (balance 700, version 2) and acknowledges it
  JournalConsumer persister(redis, options);
  std::size_t persisted = 0;
  persister.poll([&](const std::vector<JournalEvent>& events) {
    persisted += events.size();
    in_database = AccountSnapshot{700, 2, 0};
  });
  REQUIRE(persisted == 1);
  CHECK(loading.pending_orders("nell", 0ms).empty());
  const WalletResult retried = loading.deduct("nell", "d-2", 1'000);
  CHECK(retried.status == WalletResult::Status::insufficient);
  CHECK(retried.balance == 700);
  CHECK(loading.deduct("nell", "d-3", 700).balance == 0);
}

TEST_CASE_METHOD(WalletFixture, "rollback of a user that is not cached", "[wallet][redis]") {
  AccountSnapshot in_database{1'000, 1, 0};
  Wallet loading(redis, options, [&](const std::string& user) -> std::optional<AccountSnapshot> {
    return user == "gone" ? std::optional<AccountSnapshot>(in_database) : std::nullopt;
  });

  // An unknown order, user not cached: the marker is recorded; the late deduct is refused.
  CHECK(outcome(loading.rollback("gone", "late-1")) ==
        std::pair(RollbackResult::Status::recorded_unknown, false));
  CHECK_FALSE(loading.account("gone"));
  CHECK_THROWS_MATCHES(
      loading.deduct("gone", "late-1", 10), Error,
      Catch::Predicate<Error>([](const Error& e) { return e.code() == errc::conflict; }));
  CHECK_FALSE(loading.account("gone")); // refused before the user was needed

  // A done order whose user was evicted before the persister saw the deduct: the system of
  // record is older than the order, so reversing its balance would be wrong. Refused.
  REQUIRE(loading.deduct("gone", "d-1", 300).balance == 700);
  redis.command({"DEL", loading.keys().account("gone")});
  CHECK_THROWS_MATCHES(loading.rollback("gone", "d-1"), Error,
                       Catch::Predicate<Error>([](const Error& e) {
                         return e.code() == errc::conflict &&
                                std::string(e.what()).find("version 1") != std::string::npos;
                       }));
  CHECK(redis.command({"HGET", loading.keys().order("gone", "d-1"), "state"}).as_string() ==
        "done");
  CHECK_FALSE(loading.account("gone")); // the older snapshot was not cached either

  // Once the persister wrote the deduct (balance 700, version 2), the reload reverses it.
  in_database = AccountSnapshot{700, 2, 0};
  CHECK(outcome(loading.rollback("gone", "d-1")) ==
        std::pair(RollbackResult::Status::rolled_back, false));
  CHECK(loading.account("gone")->balance == 1'000);
  CHECK(loading.account("gone")->version == 3);

  // Nobody to load it from: not_found, and nothing written.
  REQUIRE(wallet.load("solo", AccountSnapshot{100, 1, 0}));
  REQUIRE(wallet.deduct("solo", "s-1", 10).status == WalletResult::Status::ok);
  redis.command({"DEL", wallet.keys().account("solo")});
  const auto before = all_keys();
  CHECK_THROWS_MATCHES(wallet.rollback("solo", "s-1"), Error,
                       Catch::Predicate<Error>([](const Error& e) {
                         return e.code() == errc::not_found &&
                                std::string(e.what()).find("solo") != std::string::npos;
                       }));
  CHECK(all_keys() == before);
}

TEST_CASE_METHOD(WalletFixture, "a loader that throws: deduct throws a limitcounter::Error",
                 "[wallet][redis]") {
  Wallet loading(redis, options, [](const std::string&) -> std::optional<AccountSnapshot> {
    throw std::runtime_error("database down");
  });
  CHECK_THROWS_MATCHES(
      loading.deduct("henry", "h-1", 5), Error, Catch::Predicate<Error>([](const Error& e) {
        return e.code() == errc::not_found && e.outcome() == limitcounter::Outcome::not_sent &&
               std::string(e.what()).find("database down") != std::string::npos &&
               std::string(e.what()).find("henry") != std::string::npos;
      }));
  CHECK_THROWS_AS(loading.credit("henry", "h-2", 5), Error);
  CHECK_FALSE(loading.account("henry"));
}

TEST_CASE_METHOD(WalletFixture,
                 "the journal is trimmed to what every group acknowledged; unread entries stay",
                 "[wallet][redis][persister]") {
  REQUIRE(wallet.load("ivan", AccountSnapshot{1'000'000, 1, 0}));
  const std::string stream = wallet.keys().journal(wallet.keys().partition_of("ivan"));
  // A second group (an auditor), created by a read of the still empty stream.
  JournalConsumerOptions audit_options;
  audit_options.group = "audit";
  audit_options.consumer = "auditor-1";
  audit_options.batch = 100;
  JournalConsumer auditor(redis, options, audit_options);
  REQUIRE(auditor.read(wallet.keys().partition_of("ivan")).empty());
  JournalConsumerOptions persister_options;
  persister_options.batch = 50;
  JournalConsumer persister(redis, options, persister_options);
  std::int64_t persisted = 0;
  std::int64_t longest = 0;
  for (int i = 0; i < 2'000; ++i) {
    REQUIRE(wallet.deduct("ivan", "i-" + std::to_string(i), 1).status == WalletResult::Status::ok);
    if (i % 25 == 24) {
      persisted += static_cast<std::int64_t>(persister.poll([](const auto&) {}));
    }
  }
  CHECK(persisted == 2'000);
  // The auditor has read nothing: every entry stays.
  CHECK(redis.command({"XLEN", stream}).as_integer() == 2'000);

  std::int64_t audited = 0;
  for (int i = 0; i < 20; ++i) {
    audited += static_cast<std::int64_t>(auditor.poll([](const auto&) {}));
    longest = std::max(longest, redis.command({"XLEN", stream}).as_integer());
  }
  CHECK(audited == 2'000); // nothing unread was trimmed
  CHECK(redis.command({"XLEN", stream}).as_integer() == 0);

  // Steady load with both groups reading: the stream stays short.
  longest = 0;
  for (int i = 0; i < 2'000; ++i) {
    REQUIRE(wallet.deduct("ivan", "j-" + std::to_string(i), 1).status == WalletResult::Status::ok);
    if (i % 25 == 24) {
      persister.poll([](const auto&) {});
      auditor.poll([](const auto&) {});
      longest = std::max(longest, redis.command({"XLEN", stream}).as_integer());
    }
  }
  CHECK(longest <= 25);
}

TEST_CASE_METHOD(WalletFixture, "after a handler failure a user's events still arrive in order",
                 "[wallet][redis][persister]") {
  REQUIRE(wallet.load("judy", AccountSnapshot{1'000, 1, 0}));
  REQUIRE(wallet.load("kim", AccountSnapshot{1'000, 1, 0}));
  JournalConsumerOptions consumer_options;
  consumer_options.claim_idle = 200ms;
  JournalConsumer consumer(redis, options, consumer_options);
  bool database_down = true;
  std::map<std::string, std::vector<std::int64_t>> persisted; // user -> versions, in order
  const auto persist = [&](const std::vector<JournalEvent>& events) {
    for (const auto& event : events) {
      if (database_down && event.user == "judy") {
        throw std::runtime_error("database down");
      }
    }
    for (const auto& event : events) {
      persisted[event.user].push_back(event.version);
    }
  };
  REQUIRE(wallet.deduct("judy", "j-1", 10).version == 2);
  CHECK_THROWS_WITH(consumer.poll(persist), "database down"); // the handler's error
  database_down = false;
  REQUIRE(wallet.deduct("judy", "j-2", 10).version == 3);
  REQUIRE(wallet.deduct("kim", "k-1", 10).version == 2);
  consumer.poll(persist); // kim's event goes; judy's later one waits behind the failed one
  CHECK(persisted["kim"] == std::vector<std::int64_t>{2});
  CHECK(persisted["judy"].empty());
  std::this_thread::sleep_for(300ms); // the failed event is retried after claim_idle
  consumer.poll(persist);
  CHECK(persisted["judy"] == std::vector<std::int64_t>{2, 3});
}

TEST_CASE_METHOD(
    WalletFixture,
    "a poison event is parked in the dead-letter stream; the user's later events follow",
    "[wallet][redis][persister]") {
  REQUIRE(wallet.load("liam", AccountSnapshot{1'000, 1, 0}));
  REQUIRE(wallet.load("mona", AccountSnapshot{1'000, 1, 0}));
  REQUIRE(wallet.deduct("liam", "poison", 10).version == 2);
  REQUIRE(wallet.deduct("liam", "l-2", 10).version == 3);
  REQUIRE(wallet.deduct("mona", "m-1", 10).version == 2);
  JournalConsumerOptions consumer_options;
  consumer_options.claim_idle = 30ms;
  consumer_options.max_attempts = 3;
  JournalConsumer consumer(redis, options, consumer_options);
  int poison_attempts = 0;
  std::vector<std::string> persisted; // "<user>:<version>" in the order written
  const auto persist = [&](const std::vector<JournalEvent>& events) {
    for (const auto& event : events) {
      if (event.order == "poison") {
        ++poison_attempts;
        throw std::runtime_error("cannot write order poison");
      }
    }
    for (const auto& event : events) {
      persisted.push_back(event.user + ":" + std::to_string(event.version));
    }
  };
  const std::uint32_t partition = wallet.keys().partition_of("liam");
  for (int i = 0; i < 200 && consumer.dead_letters(partition).empty(); ++i) {
    try {
      consumer.poll(persist);
    } catch (const std::runtime_error& e) {
      CHECK_THAT(e.what(), Catch::Contains("poison"));
    }
    std::this_thread::sleep_for(10ms);
  }
  // Each attempt is a batch try and a lone try; the third lone failure parks it.
  CHECK(poison_attempts == 6);
  const auto dead = consumer.dead_letters(partition);
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].event.order == "poison");
  CHECK(dead[0].event.user == "liam");
  CHECK(dead[0].event.version == 2);
  CHECK(dead[0].attempts == 3);
  CHECK(dead[0].error == "cannot write order poison");
  CHECK(consumer.dead_letters(partition, 10, dead[0].dead_id).empty());
  CHECK(std::find(persisted.begin(), persisted.end(), "liam:3") == persisted.end());

  consumer.poll(persist); // liam's later event is no longer held back
  CHECK(std::find(persisted.begin(), persisted.end(), "liam:3") != persisted.end());
  CHECK(std::find(persisted.begin(), persisted.end(), "mona:2") != persisted.end());
  CHECK(persisted.size() == 2);
  for (std::uint32_t p = 0; p < options.partitions; ++p) {
    CHECK(redis.command({"XLEN", wallet.keys().journal(p)}).as_integer() == 0); // all trimmed
  }
  // The parked order is still not persisted: it stays in the pending sets.
  CHECK(wallet.pending_orders("liam", 0ms) == std::vector<std::string>{"poison"});
  CHECK_THROWS_AS(consumer.dead_letters(partition, 10, "x-1"), Error);
  CHECK_THROWS_AS(consumer.read(options.partitions), Error);
}

namespace {

/// Every journal event of `user`, read and acknowledged by a persister.
std::vector<JournalEvent> persist_all(Redis& redis, const WalletOptions& options,
                                      const std::string& user) {
  JournalConsumer persister(redis, options);
  std::vector<JournalEvent> events;
  const auto keep = [&](const std::vector<JournalEvent>& batch) {
    for (const auto& event : batch) {
      if (event.user == user) {
        events.push_back(event);
      }
    }
  };
  while (persister.poll(keep) > 0) {
  }
  return events;
}

} // namespace

TEST_CASE_METHOD(WalletFixture,
                 "a frozen account refuses deductions; credits, rollbacks and replays apply",
                 "[wallet][redis][freeze]") {
  using Status = WalletResult::Status;
  REQUIRE(wallet.load("ivy", AccountSnapshot{1'000, 1, 0}));
  REQUIRE(wallet.deduct("ivy", "i-1", 100).status == Status::ok); // 900, version 2
  CHECK_FALSE(wallet.unfreeze("ivy", "not frozen")); // nothing to lift: nothing written
  CHECK(journal_length("ivy") == 1);

  const limitcounter::TimePoint at{std::chrono::milliseconds{1'700'000'000'123}};
  CHECK(wallet.freeze("ivy", "chargeback dispute #42", at));
  auto account = wallet.account("ivy");
  REQUIRE(account);
  CHECK(account->frozen);
  CHECK(account->freeze_reason == "chargeback dispute #42");
  CHECK(account->freeze_changed == at);
  CHECK(account->version == 3);
  CHECK(account->balance == 900);
  // idempotent: a second freeze changes nothing, the first reason stays
  CHECK_FALSE(wallet.freeze("ivy", "another reason"));
  CHECK(wallet.account("ivy")->freeze_reason == "chargeback dispute #42");
  CHECK(wallet.account("ivy")->version == 3);

  const WalletResult refused = wallet.deduct("ivy", "i-2", 50);
  CHECK(refused.status == Status::frozen);
  CHECK(refused.balance == 900);
  CHECK(refused.freeze_reason == "chargeback dispute #42");
  CHECK(redis.command({"EXISTS", wallet.keys().order("ivy", "i-2")}).as_integer() == 0);
  // an order done before the freeze still replays its first result
  const WalletResult replay = wallet.deduct("ivy", "i-1", 100);
  CHECK((replay.status == Status::ok && replay.replayed && replay.balance == 900));

  const auto batch = wallet.deduct_many({{"ivy", "i-3", 10}, {"ivy", "i-1", 100}});
  REQUIRE(batch.size() == 2);
  CHECK(std::get<WalletResult>(batch[0]).status == Status::frozen);
  CHECK(std::get<WalletResult>(batch[1]).replayed);

  CHECK(wallet.credit("ivy", "i-topup", 500).balance == 1'400);
  CHECK(outcome(wallet.rollback("ivy", "i-1")) ==
        std::pair(RollbackResult::Status::rolled_back, false));
  CHECK(wallet.account("ivy")->balance == 1'500);
  CHECK(wallet.account("ivy")->frozen);

  CHECK(wallet.unfreeze("ivy", "dispute won", at + 1s));
  CHECK_FALSE(wallet.unfreeze("ivy", "dispute won"));
  account = wallet.account("ivy");
  CHECK_FALSE(account->frozen);
  CHECK(account->freeze_reason == "dispute won");
  CHECK(account->freeze_changed == at + 1s);
  // the refused order was not recorded: its retry decides again
  const WalletResult retried = wallet.deduct("ivy", "i-2", 50);
  CHECK((retried.status == Status::ok && !retried.replayed && retried.balance == 1'450));

  const std::vector<JournalEvent> events = persist_all(redis, options, "ivy");
  std::vector<std::string> types;
  for (const auto& event : events) {
    types.push_back(event.type);
  }
  CHECK(types ==
        std::vector<std::string>{"deduct", "freeze", "credit", "rollback", "unfreeze", "deduct"});
  REQUIRE(events.size() == 6);
  CHECK(events[1].reason == "chargeback dispute #42");
  CHECK(events[1].order.empty());
  CHECK(events[1].amount == 0);
  CHECK(events[1].balance == 900);
  CHECK(events[1].version == 3);
  CHECK(events[1].time == at);
  CHECK(events[4].reason == "dispute won");
  CHECK(events[4].version == 6);
  CHECK(events[0].reason.empty());
  // acknowledging freeze events clears nothing else and leaves nothing pending
  CHECK(wallet.pending_orders("ivy", 0ms).empty());
  CHECK(wallet.compare("ivy", 1'450, 7).matches);
}

TEST_CASE_METHOD(WalletFixture, "freeze: bad reasons, users not cached, loads that freeze",
                 "[wallet][redis][freeze]") {
  REQUIRE(wallet.load("jo", AccountSnapshot{100, 1, 0}));
  const auto before = all_keys();
  const auto invalid = [](const std::string& part) {
    return Catch::Predicate<Error>([part](const Error& e) {
      return e.code() == errc::invalid_argument &&
             std::string(e.what()).find(part) != std::string::npos;
    });
  };
  CHECK_THROWS_MATCHES(wallet.freeze("jo", ""), Error, invalid("is empty"));
  CHECK_THROWS_MATCHES(wallet.freeze("jo", std::string(257, 'r')), Error, invalid("257 bytes"));
  CHECK_THROWS_MATCHES(wallet.freeze("jo", "two\nlines"), Error, invalid("two\\x0alines"));
  CHECK_THROWS_MATCHES(wallet.freeze("jo", "bad \xff byte"), Error, invalid("not valid UTF-8"));
  CHECK_THROWS_MATCHES(wallet.freeze("jo", "csi \xc2\x9b[2J"), Error,
                       invalid("\"csi \\u009b[2J\" contains a control character (U+009B"));
  CHECK_THROWS_MATCHES(wallet.freeze("jo", "para\xe2\x80\xa9"), Error,
                       invalid("contains a line separator (U+2029"));
  CHECK_THROWS_MATCHES(wallet.freeze("jo", "lone \x9b byte"), Error, invalid("not valid UTF-8"));
  // "jo" and "jo" + a no-break space would be two accounts that look alike
  CHECK_THROWS_MATCHES(wallet.freeze("jo\xc2\xa0", "why"), Error,
                       invalid("\"jo\\u00a0\" contains whitespace (U+00A0 at byte 2)"));
  CHECK_THROWS_MATCHES(wallet.deduct("jo\xe3\x80\x80", "o-1", 5), Error,
                       invalid("contains whitespace (U+3000"));
  CHECK_THROWS_MATCHES(wallet.unfreeze("jo", ""), Error, invalid("is empty"));
  CHECK_THROWS_MATCHES(wallet.freeze("j o", "why"), Error, invalid("j o"));
  CHECK_THROWS_MATCHES(wallet.load("jo", AccountSnapshot{100, 2, 0, "x\ty"}), Error,
                       invalid("x\\x09y"));
  // not cached and no loader: not_found, nothing written
  CHECK_THROWS_MATCHES(
      wallet.freeze("nobody", "why"), Error,
      Catch::Predicate<Error>([](const Error& e) { return e.code() == errc::not_found; }));
  CHECK(all_keys() == before);
  CHECK(wallet.freeze("jo", std::string(256, 'r')));        // the longest reason
  CHECK(wallet.unfreeze("jo", "\xe8\xa7\xa3\xe5\x86\xbb")); // UTF-8 is fine

  // not cached, with a loader: loaded first, then frozen (and a load never unfreezes)
  Wallet loading(redis, options, [](const std::string& user) -> std::optional<AccountSnapshot> {
    if (user == "kim") {
      return AccountSnapshot{700, 4, 0};
    }
    if (user == "lou") {
      return AccountSnapshot{700, 4, 0, "frozen in the database"};
    }
    return std::nullopt;
  });
  CHECK(loading.freeze("kim", "fraud check"));
  CHECK(loading.account("kim")->balance == 700);
  CHECK(loading.account("kim")->version == 5);
  CHECK(loading.load("kim", AccountSnapshot{700, 9, 0})); // newer, says not frozen
  CHECK(loading.account("kim")->frozen);
  CHECK(loading.account("kim")->freeze_reason == "fraud check");
  CHECK_THROWS_AS(loading.freeze("ghost", "why"), Error);
  // the system of record has it frozen: a deduct of the uncached user loads it frozen
  const WalletResult refused = loading.deduct("lou", "l-1", 1);
  CHECK(refused.status == WalletResult::Status::frozen);
  CHECK(refused.freeze_reason == "frozen in the database");
  CHECK(loading.account("lou")->balance == 700);
}

TEST_CASE_METHOD(WalletFixture, "deducts racing a freeze never pass after it",
                 "[wallet][redis][freeze][concurrency]") {
  REQUIRE(wallet.load("max", AccountSnapshot{1'000'000, 1, 0}));
  constexpr int threads_count = 8;
  std::atomic<int> passed{0};
  int unexpected = 0;
  std::mutex mutex;
  std::vector<std::int64_t> passed_versions;
  std::vector<bool> passed_after_refusal(threads_count, false);
  std::vector<bool> refused(threads_count, false);
  std::vector<std::thread> threads;
  for (int t = 0; t < threads_count; ++t) {
    threads.emplace_back([&, t] {
      // until refused, and then a few more: none of those may pass
      int after_refusal = 0;
      for (int i = 0; i < 20'000 && after_refusal < 5; ++i) {
        const std::string order = "m-" + std::to_string(t) + "-" + std::to_string(i);
        std::vector<WalletResult> results;
        if (i % 3 == 0) {
          for (auto& item :
               wallet.deduct_many({{"max", order + "a", 1}, {"max", order + "b", 1}})) {
            results.push_back(std::get<WalletResult>(item));
          }
        } else {
          results.push_back(wallet.deduct("max", order, 1));
        }
        const std::lock_guard<std::mutex> lock(mutex);
        for (const WalletResult& result : results) {
          if (result.status == WalletResult::Status::ok) {
            ++passed;
            passed_versions.push_back(result.version);
            passed_after_refusal[t] = passed_after_refusal[t] || refused[t];
          } else {
            // Catch's assertions are not for threads: count, check after the join
            unexpected += result.status == WalletResult::Status::frozen ? 0 : 1;
            refused[t] = true;
          }
        }
        after_refusal += refused[t] ? 1 : 0;
      }
    });
  }
  while (passed < 50) {
    std::this_thread::yield();
  }
  REQUIRE(wallet.freeze("max", "racing"));
  for (auto& thread : threads) {
    thread.join();
  }
  const auto account = wallet.account("max");
  CHECK(unexpected == 0);
  for (int t = 0; t < threads_count; ++t) {
    CHECK(refused[t]);
    CHECK_FALSE(passed_after_refusal[t]);
  }
  // the freeze's version is the one after every deduction that passed: all came before it
  std::int64_t freeze_version = 0;
  std::size_t deducts = 0;
  for (const auto& event : persist_all(redis, options, "max")) {
    if (event.type == "freeze") {
      freeze_version = event.version;
    } else {
      CHECK(event.type == "deduct");
      CHECK(freeze_version == 0); // no deduct after the freeze in the journal
      ++deducts;
    }
  }
  CHECK(deducts == passed_versions.size());
  CHECK(freeze_version == static_cast<std::int64_t>(passed_versions.size()) + 2);
  for (const std::int64_t version : passed_versions) {
    CHECK(version < freeze_version);
  }
  CHECK(account->balance == 1'000'000 - static_cast<std::int64_t>(passed_versions.size()));
  CHECK(account->frozen);
}

namespace {

/// A wallet whose loader returns `in_database` (the system of record, written by `persist`),
/// with a persister and an auditor group on the same journal, both created before the first
/// acknowledgement.
struct TwoGroupsFixture : WalletFixture {
  AccountSnapshot in_database{1'000, 1, 0};
  Wallet loading{redis, options, [this](const std::string&) -> std::optional<AccountSnapshot> {
                   return in_database;
                 }};
  std::uint32_t partition = 0;
  JournalConsumer persister{redis, options, consumer_options("persister")};
  JournalConsumer auditor{redis, options, consumer_options("audit")};
  std::string fail_type; ///< the persister's handler fails events of this type

  static JournalConsumerOptions consumer_options(const std::string& group) {
    JournalConsumerOptions o;
    o.group = group;
    o.consumer = group + "-1";
    o.max_attempts = 1; // the first failure parks
    return o;
  }

  TwoGroupsFixture() {
    partition = loading.keys().partition_of("pat");
    REQUIRE(persister.read(partition).empty());
    REQUIRE(auditor.read(partition).empty());
  }

  /// The persister's handler: writes the events' state to `in_database`.
  void write(const std::vector<JournalEvent>& events) {
    for (const auto& event : events) {
      if (event.type == fail_type) {
        throw std::runtime_error("cannot write a " + event.type);
      }
      in_database.balance = event.balance;
      in_database.version = event.version;
      if (event.type == "freeze" || event.type == "unfreeze") {
        in_database.freeze_reason = event.type == "freeze" ? event.reason : "";
      }
    }
  }
  std::size_t persist() {
    const auto events = persister.read(partition);
    try {
      write(events);
    } catch (const std::runtime_error& e) {
      return persister.reject(partition, events, e.what());
    }
    persister.acknowledge(partition, events);
    return events.size();
  }
  std::size_t audit() {
    const auto events = auditor.read(partition);
    auditor.acknowledge(partition, events);
    return events.size();
  }
  std::string high_water(const std::string& user, const std::string& field) {
    const limitcounter::Reply reply =
        redis.command({"HGET", loading.keys().high_water(user), field});
    return reply.is_nil() ? "" : reply.as_string();
  }
  std::vector<std::string> stale() { return loading.stale_pending(partition, 0ms); }
};

} // namespace

TEST_CASE_METHOD(TwoGroupsFixture,
                 "only the persister group's acknowledgements clear pending orders and the mark",
                 "[wallet][redis][persister]") {
  using Orders = std::vector<std::string>;
  REQUIRE(loading.load("pat", in_database));

  SECTION("the auditor acknowledges first, then the persister") {
    REQUIRE(loading.deduct("pat", "p-1", 100).version == 2);
    CHECK(audit() == 1);
    CHECK(loading.pending_orders("pat", 0ms) == Orders{"p-1"});
    CHECK(stale() == Orders{"pat:p-1"});
    CHECK(high_water("pat", "events") == "1");
    CHECK(journal_length("pat") == 1); // the persister still needs it
    CHECK(persist() == 1);
    CHECK(loading.pending_orders("pat", 0ms).empty());
    CHECK(stale().empty());
    CHECK(redis.command({"EXISTS", loading.keys().high_water("pat")}).as_integer() == 0);
    CHECK(journal_length("pat") == 0);
  }
  SECTION("the persister acknowledges first, then the auditor") {
    REQUIRE(loading.credit("pat", "p-1", 100).version == 2);
    CHECK(persist() == 1);
    CHECK(loading.pending_orders("pat", 0ms).empty());
    CHECK(redis.command({"EXISTS", loading.keys().high_water("pat")}).as_integer() == 0);
    CHECK(journal_length("pat") == 1); // the auditor still needs it
    CHECK(audit() == 1);
    CHECK(loading.pending_orders("pat", 0ms).empty());
    CHECK(journal_length("pat") == 0);
  }
  SECTION("the auditor parks the event: nothing is persisted until the persister writes it") {
    REQUIRE(loading.deduct("pat", "p-1", 100).version == 2);
    const auto events = auditor.read(partition);
    REQUIRE(auditor.reject(partition, events, "audit store down") == 1);
    REQUIRE(auditor.dead_letters(partition).size() == 1);
    CHECK(loading.pending_orders("pat", 0ms) == Orders{"p-1"});
    CHECK(high_water("pat", "events") == "1");
    CHECK(high_water("pat", "parked").empty()); // the persister may still write it
    CHECK(persist() == 1);
    CHECK(loading.pending_orders("pat", 0ms).empty());
    CHECK(redis.command({"EXISTS", loading.keys().high_water("pat")}).as_integer() == 0);
  }
  SECTION("the persister parks the event: the auditor's acknowledgement does not persist it") {
    REQUIRE(loading.deduct("pat", "p-1", 100).version == 2);
    fail_type = "deduct";
    CHECK(persist() == 1); // parked
    CHECK(audit() == 1);
    CHECK(loading.pending_orders("pat", 0ms) == Orders{"p-1"});
    CHECK(stale() == Orders{"pat:p-1"});
    CHECK(high_water("pat", "version") == "2");
    CHECK(journal_length("pat") == 0); // both groups are done with the entry
    // the host writes the dead letter itself, then acknowledges it as the persister
    const auto dead = persister.dead_letters(partition);
    REQUIRE(dead.size() == 1);
    fail_type.clear();
    write({dead[0].event});
    persister.acknowledge(partition, {dead[0].event});
    CHECK(loading.pending_orders("pat", 0ms).empty());
    CHECK(redis.command({"EXISTS", loading.keys().high_water("pat")}).as_integer() == 0);
    persister.acknowledge(partition, {dead[0].event}); // again: counts once
    CHECK(redis.command({"EXISTS", loading.keys().high_water("pat")}).as_integer() == 0);
  }
  SECTION("a parked event acknowledged before a later one: the mark keeps the later one") {
    REQUIRE(loading.freeze("pat", "fraud check"));
    fail_type = "freeze";
    CHECK(persist() == 1); // parked
    CHECK(high_water("pat", "parked") == "1");
    REQUIRE(loading.credit("pat", "p-1", 100).version == 3);
    persister.acknowledge(partition, {persister.dead_letters(partition).at(0).event});
    CHECK(high_water("pat", "parked").empty());
    CHECK(high_water("pat", "events") == "1");
    CHECK(high_water("pat", "version") == "3");
  }
}

TEST_CASE_METHOD(TwoGroupsFixture,
                 "an auditor's acknowledgement never lets a reload give back an unpersisted deduct",
                 "[wallet][redis][persister]") {
  REQUIRE(loading.load("pat", in_database));
  REQUIRE(loading.deduct("pat", "p-1", 300).balance == 700);
  REQUIRE(audit() == 1);
  REQUIRE(redis.command({"DEL", loading.keys().account("pat")}).as_integer() == 1);

  // the loader still has 1,000 (version 1): the reload is refused, nothing is deducted
  const Error refused = error_of([&] { loading.deduct("pat", "p-2", 1'000); });
  CHECK(refused.code() == errc::conflict);
  CHECK_FALSE(loading.account("pat"));
  CHECK(redis.command({"EXISTS", loading.keys().order("pat", "p-2")}).as_integer() == 0);

  CHECK(persist() == 1); // the database now has 700, version 2
  CHECK(loading.deduct("pat", "p-2", 1'000).status == WalletResult::Status::insufficient);
  CHECK(loading.account("pat")->balance == 700);
}

TEST_CASE_METHOD(WalletFixture, "the persister group is an option", "[wallet][redis][persister]") {
  WalletOptions writer_options = options;
  writer_options.persister_group = "db-writer";
  JournalConsumer reader(redis, writer_options); // group "persister": only reads now
  JournalConsumerOptions writer_group;
  writer_group.group = "db-writer";
  JournalConsumer writer(redis, writer_options, writer_group);
  const std::uint32_t partition = wallet.keys().partition_of("quinn");
  REQUIRE(reader.read(partition).empty()); // both groups exist before the first acknowledgement
  REQUIRE(writer.read(partition).empty());
  REQUIRE(wallet.load("quinn", AccountSnapshot{1'000, 1, 0}));
  REQUIRE(wallet.deduct("quinn", "q-1", 10).status == WalletResult::Status::ok);
  CHECK(reader.poll([](const auto&) {}) == 1);
  CHECK(wallet.pending_orders("quinn", 0ms) == std::vector<std::string>{"q-1"});
  CHECK(writer.poll([](const auto&) {}) == 1);
  CHECK(wallet.pending_orders("quinn", 0ms).empty());

  writer_options.persister_group = "bad group";
  CHECK_THROWS_MATCHES(JournalConsumer(redis, writer_options), Error,
                       Catch::Predicate<Error>([](const Error& e) {
                         return e.code() == errc::invalid_argument &&
                                std::string(e.what()).find("bad group") != std::string::npos;
                       }));
}

// The account hash lost (DEL) at each point of the journal's life; the loader has what the
// persister wrote so far. Every change not yet persisted keeps the reload out: not only deducts
// and credits (pending orders) but rollbacks, freezes and dead letters too.
TEST_CASE_METHOD(TwoGroupsFixture,
                 "a reload never goes back past any change the persister has not acknowledged",
                 "[wallet][redis][persister]") {
  REQUIRE(loading.load("pat", in_database));
  // Loses the account, tries the reload, puts the account back; returns whether it loaded.
  const auto lose_and_reload = [&] {
    const std::string account = loading.keys().account("pat");
    const limitcounter::Reply fields = redis.command({"HGETALL", account});
    REQUIRE(redis.command({"DEL", account}).as_integer() == 1);
    bool loaded = false;
    try {
      loaded = loading.load("pat", in_database);
    } catch (const Error& e) {
      CHECK(e.code() == errc::conflict);
      CHECK_FALSE(loading.account("pat"));
      std::vector<std::string> restore{"HSET", account};
      for (const auto& item : fields.as_array()) {
        restore.push_back(item.as_string());
      }
      REQUIRE_FALSE(redis.command(restore).is_error());
    }
    return loaded;
  };

  REQUIRE(loading.deduct("pat", "d-1", 300).version == 2); // 700
  CHECK_FALSE(lose_and_reload());
  REQUIRE(loading.credit("pat", "c-1", 200).version == 3); // 900
  CHECK_FALSE(lose_and_reload());

  REQUIRE(persist() == 2); // the database: 900, version 3; nothing pending
  REQUIRE(outcome(loading.rollback("pat", "d-1")) ==
          std::pair(RollbackResult::Status::rolled_back, false)); // 1,200, version 4
  CHECK(loading.pending_orders("pat", 0ms).empty());
  CHECK_FALSE(lose_and_reload()); // 900 would lose the rollback's 300

  REQUIRE(persist() == 1);                       // 1,200, version 4
  REQUIRE(loading.freeze("pat", "fraud check")); // version 5
  CHECK_FALSE(lose_and_reload());                // would come back unfrozen

  fail_type = "freeze";
  REQUIRE(persist() == 1); // parked: the database stays at version 4, not frozen
  CHECK(high_water("pat", "version") == "5");
  CHECK(journal_length("pat") == 4); // the auditor has not read yet
  CHECK(audit() == 4);
  CHECK_FALSE(lose_and_reload());
  CHECK(loading.account("pat")->frozen);

  // the host writes the dead letter and the persister acknowledges it: the mark is gone
  fail_type.clear();
  const auto dead = persister.dead_letters(partition);
  REQUIRE(dead.size() == 1);
  write({dead[0].event});
  persister.acknowledge(partition, {dead[0].event});
  CHECK(redis.command({"EXISTS", loading.keys().high_water("pat")}).as_integer() == 0);
  CHECK(lose_and_reload());
  const auto account = loading.account("pat");
  CHECK(account->balance == 1'200);
  CHECK(account->version == 5);
  CHECK(account->frozen);
}

// A parked event is acknowledged, so the user's later events go on and the database may get a
// version newer than the parked event without it: no snapshot's version can tell that it lacks
// the parked change, so every reload waits until the host has written and acknowledged it.
TEST_CASE_METHOD(TwoGroupsFixture,
                 "a reload is refused while an event of the user is parked, whatever its version",
                 "[wallet][redis][persister]") {
  REQUIRE(loading.load("pat", in_database));
  REQUIRE(loading.deduct("pat", "d-1", 300).version == 2);
  REQUIRE(persist() == 1); // the database: 700, version 2
  SECTION("a freeze") {
    REQUIRE(loading.freeze("pat", "fraud check"));
    fail_type = "freeze";
  }
  SECTION("a deduct") {
    REQUIRE(loading.deduct("pat", "d-2", 200).version == 3);
    fail_type = "deduct";
  }
  SECTION("a rollback") {
    REQUIRE(outcome(loading.rollback("pat", "d-1")) ==
            std::pair(RollbackResult::Status::rolled_back, false));
    fail_type = "rollback";
  }
  REQUIRE(persist() == 1); // version 3 parked
  const auto dead = persister.dead_letters(partition);
  REQUIRE(dead.size() == 1);
  CHECK(high_water("pat", "parked") == "1");
  fail_type.clear();
  REQUIRE(loading.credit("pat", "c-1", 50).version == 4); // a credit applies to a frozen account
  REQUIRE(persist() == 1);
  REQUIRE(in_database.version == 4); // newer than the parked event, without it
  REQUIRE(audit() == 3);
  REQUIRE(redis.command({"DEL", loading.keys().account("pat")}).as_integer() == 1);

  const Error refused = error_of([&] { loading.load("pat", in_database); });
  CHECK(refused.code() == errc::conflict);
  CHECK(refused.outcome() == limitcounter::Outcome::failed);
  CHECK_THAT(refused.what(), Catch::Contains("wallet pat") && Catch::Contains("parked"));
  CHECK(redis.command({"EXISTS", loading.keys().account("pat")}).as_integer() == 0);
  // the loader's reload too: nothing deducted, no order recorded
  CHECK(error_of([&] { loading.deduct("pat", "d-3", 1); }).code() == errc::conflict);
  CHECK(redis.command({"EXISTS", loading.keys().account("pat")}).as_integer() == 0);
  CHECK(redis.command({"EXISTS", loading.keys().order("pat", "d-3")}).as_integer() == 0);

  // The host writes the parked change into the database (which keeps the newest event's balance
  // and version, so only a freeze's flag is missing there), then acknowledges it.
  if (dead[0].event.type == "freeze") {
    in_database.freeze_reason = dead[0].event.reason;
  }
  persister.acknowledge(partition, {dead[0].event});
  CHECK(redis.command({"EXISTS", loading.keys().high_water("pat")}).as_integer() == 0);
  CHECK(loading.load("pat", in_database));
  const auto account = loading.account("pat");
  CHECK(account->version == 4);
  CHECK(account->balance == in_database.balance);
  CHECK(account->frozen == (dead[0].event.type == "freeze"));
}
