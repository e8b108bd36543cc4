// Billing: balances deducted in Redis first, persisted to the system of record (SQLite, or
// MariaDB/MySQL with --mysql: billing_store.hpp) by a journal consumer, each event exactly
// once. Several threads deduct, top up and roll back; at the end every user's balance in the
// database equals the Redis balance and every order is there once. Users missing in Redis are
// loaded from the database, so a second run on the same database goes on from the first.
// One event the database keeps refusing is dead-lettered, and written by the operator's step.
//
//   billing [redis-uri] [--sqlite=PATH | --mysql [--mysql-host=H --mysql-port=N ...]]

#include <atomic>
#include <iostream>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include <limitcounter/limitcounter.hpp>

#include "billing_store.hpp"
#include "example_support.hpp"

namespace lc = limitcounter;
using namespace std::chrono_literals;

int main(int argc, char** argv) try {
  std::vector<std::string> args(argv + 1, argv + argc);
  const auto store = billing::open_store(args);
  std::vector<char*> redis_args{argv[0]};
  for (auto& arg : args) {
    redis_args.push_back(arg.data());
  }
  auto redis_options = lc::RedisOptions::from_uri(
      example::redis_uri(static_cast<int>(redis_args.size()), redis_args.data()));
  // Its test runs beside builds and other tests: the defaults' 50 ms waits (for a payment
  // path) time out there now and then, failing a run that is not about timeouts.
  redis_options.connect_timeout = 2s;
  redis_options.command_timeout = 2s;
  lc::Redis redis(redis_options);
  example::Checks checks;
  const std::string run = std::to_string(lc::Clock::now().time_since_epoch().count());
  constexpr int users = 20;
  for (int u = 0; u < users; ++u) {
    store->open_account("user" + std::to_string(u), lc::AccountSnapshot{10000, 1, -1000});
  }

  lc::WalletOptions options;
  options.key_prefix = "demo:wallet:" + run + ":";
  options.partitions = 4;
  // The loader reads the system of record when a user is not cached yet.
  lc::Wallet wallet(redis, options, [&](const std::string& user) { return store->account(user); });

  std::atomic<int> accepted{0};
  std::atomic<int> refused{0};
  std::atomic<int> rolled_back{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.push_back(checks.thread("deducter " + std::to_string(t), [&, t] {
      std::mt19937 random(static_cast<unsigned>(t) + 11);
      for (int i = 0; i < 300; ++i) {
        const std::string user = "user" + std::to_string(random() % users);
        // unique across runs: a later run on the same database adds its own orders
        const std::string order = run + "-" + std::to_string(t) + "-" + std::to_string(i);
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
          // `replayed` too when this rollback's first send ran and its reply was lost
          const auto rollback = example::with_same_id([&] { return wallet.rollback(user, order); });
          rolled_back += rollback.status == lc::RollbackResult::Status::rolled_back ? 1 : 0;
        }
      }
    }));
  }

  lc::JournalConsumerOptions consumer_options;
  consumer_options.consumer = "billing-" + run;
  // Events whose acknowledgement was lost come again after claim_idle: short here so that the
  // example ends soon after one (a production persister keeps the default 30 s).
  consumer_options.claim_idle = 1s;
  // An event the handler fails this many times is parked in the dead-letter stream, and its
  // user's later events go on (the default is 5; 2 keeps the example short).
  consumer_options.max_attempts = 2;
  lc::JournalConsumer consumer(redis, options, consumer_options);
  const auto all_persisted = [&] {
    for (std::uint32_t p = 0; p < options.partitions; ++p) {
      if (!example::with_same_id([&] { return wallet.stale_pending(p, 0ms); }).empty()) {
        return false;
      }
    }
    return true;
  };
  // The persister. The first delivery of every fifth batch loses its acknowledgement (it
  // throws after the commits, as a process dying there would): the consumer hands those events
  // again and the store acknowledges them without applying them twice. And the first deduct
  // it sees of an order that is rolled back (i % 10 == 3: the order id ends in 3), the database
  // refuses every time (as a row breaking a constraint would): it is parked, and its rollback
  // reaches the database before it. Only this thread touches these counters until joined.
  std::string refused_event;
  std::int64_t applied = 0;
  std::int64_t ack_lost = 0;
  std::int64_t redelivered_unapplied = 0;
  std::int64_t batches = 0;
  std::set<std::string> delivered;
  std::vector<lc::JournalEvent> to_replay; // the first events applied, replayed at the end
  const auto persist = [&](const std::vector<lc::JournalEvent>& events) {
    const bool first_delivery = delivered.count(events.front().id) == 0;
    for (const auto& event : events) {
      if (refused_event.empty() && event.type == "deduct" && event.order.back() == '3') {
        refused_event = event.id;
      }
      if (event.id == refused_event) {
        throw std::runtime_error("the database refused event " + event.id);
      }
      delivered.insert(event.id);
      if (!store->apply(event)) {
        ++redelivered_unapplied;
        continue;
      }
      ++applied;
      if (to_replay.size() < 200) {
        to_replay.push_back(event);
      }
    }
    if (first_delivery && batches++ % 5 == 0) {
      ack_lost += static_cast<std::int64_t>(events.size());
      throw std::runtime_error("the acknowledgement was lost");
    }
  };
  // The operator's step, once an alert on dead letters was looked into (here: when every other
  // event is persisted, so that its user's later events were applied before it): write each
  // parked event to the database (its order; its balance is in those later events'),
  // acknowledge it with the persister group, which counts it as persisted, and delete it.
  std::int64_t dead_letters_written = 0;
  const auto write_dead_letters = [&] {
    for (const auto& lag : example::with_same_id([&] { return consumer.lag(); })) {
      if (lag.unread != 0 || lag.pending != 0) {
        return;
      }
    }
    for (std::uint32_t p = 0; p < options.partitions; ++p) {
      for (const auto& letter : example::with_same_id([&] { return consumer.dead_letters(p); })) {
        store->apply(letter.event);
        example::with_same_id([&] {
          consumer.acknowledge(p, {letter.event});
          return redis.command(
              {"XDEL", wallet.keys().dead_letters(p, consumer_options.group), letter.dead_id});
        });
        ++dead_letters_written;
      }
    }
  };
  std::atomic<bool> producing{true};
  std::atomic<int> poll_errors{0};
  int handler_failures = 0;
  std::thread persister = checks.thread("persister", [&] {
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    while (std::chrono::steady_clock::now() < deadline) {
      const bool last_round = !producing;
      std::size_t handled = 0;
      try {
        handled = consumer.poll(persist);
      } catch (const lc::Error& e) {
        // Redis did not answer a read or an acknowledgement: what was not acknowledged comes
        // again (the store skips what it applied). Alert on an input error or a refusal.
        if (e.is_input_error() || e.outcome() == lc::Outcome::failed) {
          throw;
        }
        ++poll_errors;
      } catch (const std::runtime_error&) {
        // the handler's failure, rethrown by poll once every partition was served: that event
        // is retried after claim_idle, then parked
        ++handler_failures;
      }
      if (handled == 0) {
        if (last_round) {
          write_dead_letters();
          if (all_persisted()) {
            break;
          }
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
            << rolled_back << " rolled back, " << 6 * 12 << " top-ups; " << applied
            << " journal events applied; " << poll_errors << " persister polls cut short by Redis; "
            << handler_failures << " refused by the database, " << dead_letters_written
            << " dead-lettered event written by the operator\n";
  example::print_resends();
  checks.expect_threads_finished();
  checks.expect(ack_lost > 0 && redelivered_unapplied >= ack_lost, // and those of Redis lost acks
                "the " + std::to_string(ack_lost) +
                    " events redelivered after a lost acknowledgement were not applied again");
  std::int64_t replay_applied = 0;
  for (const auto& event : to_replay) {
    replay_applied += store->apply(event) ? 1 : 0;
  }
  checks.expect(handler_failures >= 2 && dead_letters_written == 1,
                "the event the database refused was parked after 2 attempts, then written once");
  checks.expect(replay_applied == 0, "replaying " + std::to_string(to_replay.size()) +
                                         " applied events applied none again");
  bool balances_match = true;
  for (int u = 0; u < users; ++u) {
    const std::string user = "user" + std::to_string(u);
    const auto cached = example::with_same_id([&] { return wallet.account(user); });
    const auto stored = store->account(user);
    balances_match = balances_match && cached && stored && cached->balance == stored->balance &&
                     cached->version == stored->version;
  }
  checks.expect(balances_match, "for every user, database balance == redis balance (and version)");
  const std::int64_t rolled_back_orders = store->orders(run + "-", "rolled_back");
  const std::int64_t orders = store->orders(run + "-", "done") + rolled_back_orders;
  checks.expect(orders == accepted + 6 * 12,
                "every order is in the database exactly once (" + std::to_string(orders) + ")");
  checks.expect(rolled_back_orders == rolled_back, "every rollback reached the database");
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
  return checks.exit_code();
} catch (const std::exception& e) { // what the helpers throw: alert
  std::cerr << "billing: " << e.what() << '\n';
  return 1;
}
