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
  pool.create(packet_id, amounts, packet_options);
  // A create retried (e.g. after a timeout) with the same content is a replay, not a conflict.
  checks.expect(pool.create(packet_id, amounts, packet_options).replayed,
                "a repeated create with the same amounts is a replay");
  std::cout << "Packet " << packet_id << ": " << packets << " packets, 100000.00 in all\n";

  std::mutex mutex;
  std::map<std::string, std::int64_t> granted; // user -> amount
  int granted_twice = 0;
  int grab_errors = 0;
  std::atomic<int> grabbers_left{8};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int first = t * (users / 8); first < (t + 1) * (users / 8); first += 64) {
        std::vector<std::string> batch;
        for (int u = first; u < std::min(first + 64, (t + 1) * (users / 8)); ++u) {
          batch.push_back("user" + std::to_string(u));
        }
        const auto results = pool.grab_many(packet_id, batch);
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
    });
  }

  std::map<std::string, int> payments; // idempotency key -> successful payouts
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      std::mt19937 random(static_cast<unsigned>(w) + 1);
      // Work until every granted packet is paid: a payout refused several times in a row
      // waits out a growing back-off, so "the queue looked empty for a while" is not "done".
      const auto all_paid = [&] {
        const std::lock_guard<std::mutex> lock(mutex);
        return grabbers_left == 0 && payments.size() == granted.size();
      };
      const auto deadline = lc::Clock::now() + 120s;
      while (!all_paid() && lc::Clock::now() < deadline) {
        const std::size_t paid = pool.run_payouts(
            [&](const lc::PayoutTask& task) {
              if (random() % 5 == 0) { // the bank refuses one payout in five
                ++failures;
                return false;
              }
              const std::lock_guard<std::mutex> lock(mutex);
              ++payments[task.idempotency_key()];
              return true;
            },
            200);
        if (paid == 0) {
          std::this_thread::sleep_for(10ms);
        }
      }
    });
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
  bool paid_once = payments.size() == granted.size();
  for (const auto& [key, count] : payments) {
    paid_once = paid_once && count == 1;
  }
  std::cout << "  granted " << granted.size() << " packets to " << granted.size() << " of " << users
            << " users; " << failures << " payouts failed and were retried\n";
  checks.expect(static_cast<int>(granted.size()) == packets, "every packet was granted");
  checks.expect(sum == total, "the granted amounts sum to exactly 100000.00");
  const auto repeat = pool.grab(packet_id, granted.begin()->first);
  checks.expect(granted_twice == 0 && repeat.status == lc::GrabResult::Status::already &&
                    repeat.amount == granted.begin()->second,
                "each user got at most one packet; a repeat grab gives the same amount");
  checks.expect(paid_once, "every task was paid exactly once");
  checks.expect(grab_errors == 0, "no grab failed");
  const auto closed = pool.close(packet_id);
  checks.expect(closed.closed_now && closed.leftover == 0, "nothing is left to return");
  checks.expect(pool.close(packet_id).replayed, "a repeated close is a replay");
  return checks.exit_code();
} catch (const lc::Error& e) {
  std::cerr << "red_packet: " << e.what() << '\n';
  return 1;
}
