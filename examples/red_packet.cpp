// Red packets: a 100,000.00 total split into 10,000 packets, grabbed by 30,000 users on
// several threads while payout workers drain the queue and some payouts fail at random.
//
//   red_packet [redis-uri]

#include <atomic>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <variant>

#include <limitcounter/limitcounter.hpp>

#include "example_support.hpp"

namespace lc = limitcounter;
using namespace std::chrono_literals;

int main(int argc, char** argv) try {
  lc::Redis redis(example::redis_uri(argc, argv));
  lc::RedPacketOptions options;
  options.key_prefix = "demo:rp:";
  options.payout_backoff = 5ms;
  options.max_payout_attempts = 20;
  options.visibility_timeout = 5s;
  lc::RedPacketPool pool(redis, options);
  example::Checks checks;

  constexpr std::int64_t total = 100'000'00; // 100,000.00 in cents
  constexpr int packets = 10'000;
  constexpr int users = 30'000;
  const std::string packet_id =
      "new-year-" + std::to_string(lc::Clock::now().time_since_epoch().count());
  lc::PacketOptions packet_options; // kept: a retried create must pass the same options
  packet_options.expires_at = lc::Clock::now() + 1h;
  const auto amounts = lc::split(total, packets);
  // Every call here has an id (the packet, the user, the lease): after a lost reply it is sent
  // again with the same arguments (example::with_same_id) and applies once.
  const auto create = [&] {
    return example::with_same_id([&] { return pool.create(packet_id, amounts, packet_options); });
  };
  create();
  // A create retried (e.g. after a timeout) with the same content is a replay, not a conflict.
  checks.expect(create().replayed, "a repeated create with the same amounts is a replay");
  std::cout << "Packet " << packet_id << ": " << packets << " packets, 100000.00 in all\n";

  std::mutex mutex;
  std::map<std::string, std::int64_t> granted; // user -> amount
  int granted_twice = 0;
  int grab_errors = 0;
  std::atomic<int> grabbers_left{8};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.push_back(checks.thread("grabber " + std::to_string(t), [&, t] {
      for (int first = t * (users / 8); first < (t + 1) * (users / 8); first += 64) {
        std::vector<std::string> batch;
        for (int u = first; u < std::min(first + 64, (t + 1) * (users / 8)); ++u) {
          batch.push_back("user" + std::to_string(u));
        }
        // A batch whose reply was lost is sent again whole: each grab is idempotent by user,
        // and a user who won gets `granted` again with the same amount (`replayed`).
        const auto results =
            example::with_same_id([&] { return pool.grab_many(packet_id, batch); });
        const std::lock_guard<std::mutex> lock(mutex);
        for (std::size_t i = 0; i < results.size(); ++i) {
          const auto* result = std::get_if<lc::GrabResult>(&results[i]);
          if (result == nullptr) {
            ++grab_errors; // that grab alone failed; the others' results stand
          } else if (result->status == lc::GrabResult::Status::granted) {
            granted_twice += granted.emplace(batch[i], result->amount).second ? 0 : 1;
          }
        }
      }
      --grabbers_left;
    }));
  }

  // The bank pays each idempotency key once: a task whose acknowledgement was lost comes back
  // after its lease (visibility_timeout), and paying it again must change nothing.
  std::map<std::string, std::int64_t> payments; // idempotency key -> the amount the bank paid
  std::atomic<int> failures{0};
  std::atomic<int> bank_replays{0};
  std::atomic<int> payout_errors{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.push_back(checks.thread("payout worker " + std::to_string(w), [&, w] {
      std::mt19937 random(static_cast<unsigned>(w) + 1);
      // Work until every granted packet is paid: a payout refused several times in a row
      // waits out a growing back-off, so "the queue looked empty for a while" is not "done".
      const auto all_paid = [&] {
        const std::lock_guard<std::mutex> lock(mutex);
        return grabbers_left == 0 && payments.size() == granted.size();
      };
      // The bank pays a task once per idempotency key; true if paid (now or before).
      const auto pay = [&](const lc::PayoutTask& task) {
        const std::lock_guard<std::mutex> lock(mutex);
        if (payments.count(task.idempotency_key()) != 0) {
          ++bank_replays; // paid before: the bank answers "done" and pays nothing
          return true;
        }
        if (random() % 5 == 0) { // the bank refuses one payout in five
          ++failures;
          return false;
        }
        payments.emplace(task.idempotency_key(), task.amount);
        return true;
      };
      // What run_payouts does, with each step's lost reply handled on its own: a take whose
      // reply was lost is not re-sent (its tasks come back when their lease runs out, counted
      // as one failed attempt); an ack or a fail is idempotent by the task's lease, so it is
      // sent again until Redis answers.
      const auto deadline = lc::Clock::now() + 120s;
      while (!all_paid() && lc::Clock::now() < deadline) {
        std::size_t taken = 0;
        for (std::uint32_t p = 0; p < options.partitions; ++p) {
          const auto tasks = example::at_most_once([&] { return pool.take_payouts(p, 50); });
          payout_errors += tasks ? 0 : 1;
          for (const auto& task : tasks.value_or(std::vector<lc::PayoutTask>{})) {
            ++taken;
            if (pay(task)) {
              example::with_same_id([&] { return pool.ack_payout(task); });
            } else {
              example::with_same_id([&] { return pool.fail_payout(task); });
            }
          }
        }
        if (taken == 0) {
          std::this_thread::sleep_for(10ms);
        }
      }
    }));
  }
  for (auto& thread : threads) {
    thread.join();
  }
  for (auto& worker : workers) {
    worker.join();
  }

  std::int64_t sum = 0;
  for (const auto& entry : granted) {
    sum += entry.second;
  }
  bool paid_as_granted = payments.size() == granted.size();
  for (const auto& [user, amount] : granted) {
    const auto payment = payments.find(packet_id + ":" + user);
    paid_as_granted = paid_as_granted && payment != payments.end() && payment->second == amount;
  }
  std::cout << "  granted " << granted.size() << " packets to " << granted.size() << " of " << users
            << " users; " << failures << " payouts failed and were retried; " << bank_replays
            << " handed out again after a lost acknowledgement (paid once); " << payout_errors
            << " takes whose reply was lost\n";
  checks.expect_threads_finished();
  checks.expect(static_cast<int>(granted.size()) == packets, "every packet was granted");
  checks.expect(sum == total, "the granted amounts sum to exactly 100000.00");
  if (granted.empty()) {
    return checks.exit_code();
  }
  const auto repeat =
      example::with_same_id([&] { return pool.grab(packet_id, granted.begin()->first); });
  checks.expect(granted_twice == 0 && repeat.status == lc::GrabResult::Status::granted &&
                    repeat.replayed && repeat.amount == granted.begin()->second,
                "each user got at most one packet; a repeat grab gives the same amount");
  checks.expect(paid_as_granted, "every grant was paid once, its amount (the bank pays each "
                                 "idempotency key once)");
  checks.expect(grab_errors == 0, "no grab failed");
  const auto close = [&] { return example::with_same_id([&] { return pool.close(packet_id); }); };
  const auto closed = close();
  // closed_now, or a replay when the first close's reply was lost and it was sent again
  checks.expect((closed.closed_now || closed.replayed) && closed.leftover == 0,
                "nothing is left to return");
  checks.expect(close().replayed, "a repeated close is a replay");
  example::print_resends();
  return checks.exit_code();
} catch (const std::exception& e) { // what the helpers throw: alert
  std::cerr << "red_packet: " << e.what() << '\n';
  return 1;
}
