// Billing: balances deducted in Redis first, persisted to SQLite (the system of record)
// by a journal consumer. Several threads deduct, top up and roll back; at the end every
// user's SQLite balance equals the Redis balance and every order is in SQLite once.
//
//   billing [redis-uri]

#include <atomic>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <random>
#include <thread>

#include <sqlite3.h>

#include <limitcounter/limitcounter.hpp>

#include "example_support.hpp"

namespace lc = limitcounter;
using namespace std::chrono_literals;

namespace {

// The system of record: one SQLite connection, used under a mutex.
class Database {
public:
  explicit Database(const std::string& path) {
    if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) {
      throw std::runtime_error("cannot open " + path);
    }
    exec("CREATE TABLE accounts (user TEXT PRIMARY KEY, balance INTEGER, version INTEGER, "
         "threshold INTEGER);"
         "CREATE TABLE orders (id TEXT PRIMARY KEY, user TEXT, type TEXT, amount INTEGER, state "
         "TEXT);"
         "CREATE TABLE applied_events (id TEXT PRIMARY KEY);");
  }
  ~Database() { sqlite3_close(db_); }
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  void exec(const std::string& sql) {
    char* error = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
      const std::string message = error != nullptr ? error : "unknown";
      sqlite3_free(error);
      throw std::runtime_error("sqlite: " + message + " in " + sql);
    }
  }
  // The first column of the first row, as an integer (0 if none).
  std::int64_t number(const std::string& sql) {
    sqlite3_stmt* statement = nullptr;
    sqlite3_prepare_v2(db_, sql.c_str(), -1, &statement, nullptr);
    std::int64_t value = 0;
    if (sqlite3_step(statement) == SQLITE_ROW) {
      value = sqlite3_column_int64(statement, 0);
    }
    sqlite3_finalize(statement);
    return value;
  }
  int changes() { return sqlite3_changes(db_); }
  std::mutex mutex;

private:
  sqlite3* db_ = nullptr;
};

// Writes a batch of journal events in one transaction; an event applied before is skipped,
// so a redelivery changes nothing.
void persist(Database& db, const std::vector<lc::JournalEvent>& events) {
  const std::lock_guard<std::mutex> lock(db.mutex);
  db.exec("BEGIN");
  for (const auto& event : events) {
    db.exec("INSERT OR IGNORE INTO applied_events VALUES ('" + event.id + "')");
    if (db.changes() == 0) {
      continue;
    }
    const std::string set_account =
        "UPDATE accounts SET balance = " + std::to_string(event.balance) +
        ", version = " + std::to_string(event.version) + " WHERE user = '" + event.user + "'";
    db.exec(set_account);
    if (event.type == "rollback") {
      db.exec("UPDATE orders SET state = 'rolled_back' WHERE id = '" + event.order + "'");
    } else if (event.type == "freeze" || event.type == "unfreeze") {
      // an account change without an order: the balance and version above are all it moves
    } else {
      db.exec("INSERT INTO orders VALUES ('" + event.order + "', '" + event.user + "', '" +
              event.type + "', " + std::to_string(event.amount) + ", 'done')");
    }
  }
  db.exec("COMMIT");
}

} // namespace

int main(int argc, char** argv) try {
  lc::Redis redis(example::redis_uri(argc, argv));
  example::Checks checks;
  const std::string run = std::to_string(lc::Clock::now().time_since_epoch().count());
  const std::string path = "/tmp/limitcounter-billing-" + run + ".db";
  Database db(path);
  constexpr int users = 20;
  for (int u = 0; u < users; ++u) {
    db.exec("INSERT INTO accounts VALUES ('user" + std::to_string(u) + "', 10000, 1, -1000)");
  }

  lc::WalletOptions options;
  options.key_prefix = "demo:wallet:" + run + ":";
  options.partitions = 4;
  // The loader reads the system of record when a user is not cached yet.
  lc::Wallet wallet(redis, options,
                    [&](const std::string& user) -> std::optional<lc::AccountSnapshot> {
                      const std::lock_guard<std::mutex> lock(db.mutex);
                      const std::string where = " FROM accounts WHERE user = '" + user + "'";
                      if (db.number("SELECT COUNT(*)" + where) == 0) {
                        return std::nullopt;
                      }
                      return lc::AccountSnapshot{db.number("SELECT balance" + where),
                                                 db.number("SELECT version" + where),
                                                 db.number("SELECT threshold" + where)};
                    });

  std::atomic<int> accepted{0};
  std::atomic<int> refused{0};
  std::atomic<int> rolled_back{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.push_back(checks.thread("deducter " + std::to_string(t), [&, t] {
      std::mt19937 random(static_cast<unsigned>(t) + 11);
      for (int i = 0; i < 300; ++i) {
        const std::string user = "user" + std::to_string(random() % users);
        const std::string order = "o" + std::to_string(t) + "-" + std::to_string(i);
        // Every wallet call has an order id: after a lost reply it is sent again with the same
        // id (example::with_same_id) and returns its first result (`replayed`), applied once.
        if (i % 25 == 0) {
          example::with_same_id([&] { return wallet.credit(user, order, 500); });
          continue;
        }
        const auto amount = 1 + static_cast<std::int64_t>(random() % 300);
        const auto result =
            example::with_same_id([&] { return wallet.deduct(user, order, amount); });
        if (result.status != lc::WalletResult::Status::ok) {
          ++refused;
          continue;
        }
        ++accepted;
        if (i % 10 == 3) {
          // `already`: this rollback's first send ran and its reply was lost
          const auto rollback = example::with_same_id([&] { return wallet.rollback(user, order); });
          rolled_back +=
              rollback == lc::RollbackResult::rolled_back || rollback == lc::RollbackResult::already
                  ? 1
                  : 0;
        }
      }
    }));
  }

  lc::JournalConsumerOptions consumer_options;
  consumer_options.consumer = "billing-" + run;
  // Events whose acknowledgement was lost come again after claim_idle: short here so that the
  // example ends soon after one (a production persister keeps the default 30 s).
  consumer_options.claim_idle = 1s;
  lc::JournalConsumer consumer(redis, options, consumer_options);
  const auto all_persisted = [&] {
    for (std::uint32_t p = 0; p < options.partitions; ++p) {
      if (!example::with_same_id([&] { return wallet.stale_pending(p, 0ms); }).empty()) {
        return false;
      }
    }
    return true;
  };
  std::atomic<bool> producing{true};
  std::atomic<int> poll_errors{0};
  std::thread persister = checks.thread("persister", [&] {
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    while (std::chrono::steady_clock::now() < deadline) {
      const bool last_round = !producing;
      std::size_t handled = 0;
      try {
        handled = consumer.poll([&](const auto& events) { persist(db, events); });
      } catch (const lc::Error& e) {
        // Redis did not answer a read or an acknowledgement: what was not acknowledged comes
        // again (persist skips what it applied). Alert on an input error or a refusal.
        if (e.is_input_error() || e.outcome() == lc::Outcome::failed) {
          throw;
        }
        ++poll_errors;
      }
      if (handled == 0) {
        if (last_round && all_persisted()) {
          break;
        }
        std::this_thread::sleep_for(5ms);
      }
    }
  });
  for (auto& thread : threads) {
    thread.join();
  }
  producing = false;
  persister.join();

  std::cout << "  " << accepted << " deductions, " << refused << " refused at the threshold, "
            << rolled_back << " rolled back, " << 6 * 12 << " top-ups; " << poll_errors
            << " persister polls cut short by Redis\n";
  example::print_resends();
  checks.expect_threads_finished();
  bool balances_match = true;
  for (int u = 0; u < users; ++u) {
    const std::string user = "user" + std::to_string(u);
    const auto cached = example::with_same_id([&] { return wallet.account(user); });
    const std::string where = " FROM accounts WHERE user = '" + user + "'";
    balances_match = balances_match && cached &&
                     cached->balance == db.number("SELECT balance" + where) &&
                     cached->version == db.number("SELECT version" + where);
  }
  checks.expect(balances_match, "for every user, sqlite balance == redis balance (and version)");
  const std::int64_t orders = db.number("SELECT COUNT(*) FROM orders");
  checks.expect(orders == accepted + 6 * 12,
                "every order is in SQLite exactly once (" + std::to_string(orders) + ")");
  checks.expect(db.number("SELECT COUNT(*) FROM orders WHERE state = 'rolled_back'") == rolled_back,
                "every rollback reached SQLite");
  bool nothing_pending = true;
  bool journal_trimmed = true;
  for (std::uint32_t p = 0; p < options.partitions; ++p) {
    nothing_pending = nothing_pending &&
                      example::with_same_id([&] { return wallet.stale_pending(p, 0ms); }).empty() &&
                      example::with_same_id([&] { return consumer.dead_letters(p); }).empty();
    // every event acknowledged by the only consumer group: the stream is trimmed empty
    journal_trimmed =
        journal_trimmed && example::with_same_id([&] {
                             return redis.command({"XLEN", wallet.keys().journal(p)}).as_integer();
                           }) == 0;
  }
  checks.expect(nothing_pending, "no order is left pending, none is dead-lettered");
  checks.expect(journal_trimmed, "the journal streams are trimmed to what is not yet persisted");
  std::remove(path.c_str());
  return checks.exit_code();
} catch (const std::exception& e) { // what the helpers throw: alert
  std::cerr << "billing: " << e.what() << '\n';
  return 1;
}
