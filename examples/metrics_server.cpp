// Metrics over HTTP: a PrometheusObserver watches a LimitCounter that decides payments, SMS
// caps and login rate limits, and a wallet with its journal persister, and a tiny server on
// 127.0.0.1 serves its `GET /metrics` while the calls run. Point a Prometheus scrape job (or curl)
// at the printed address.
//
//   metrics_server [redis-uri] [port (0: a free one)] [seconds to serve (default 3)]

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <limitcounter/limitcounter.hpp>
#include <limitcounter/prometheus.hpp>

#include "example_support.hpp"
#include "metrics_http.hpp"

namespace lc = limitcounter;
using namespace std::chrono_literals;

int main(int argc, char** argv) try {
  const auto port = static_cast<std::uint16_t>(argc > 2 ? std::atoi(argv[2]) : 0);
  const auto serve_for = std::chrono::seconds(argc > 3 ? std::atoi(argv[3]) : 3);

  auto metrics = std::make_shared<lc::PrometheusObserver>();
  lc::Redis redis(example::redis_uri(argc, argv));
  lc::LimitCounterOptions options;
  options.key_prefix = "demo:metrics:";
  options.observer = metrics;
  lc::LimitCounter limits(redis, lc::Calendar("Asia/Shanghai"), options);
  limits.set_rules(lc::RuleSet().add(
      lc::Rule("merchant-day").where("merchant").per(lc::Period::day).max_count(3)));
  lc::WalletOptions wallet_options;
  wallet_options.key_prefix = "demo:metrics:wallet:";
  wallet_options.partitions = 2;
  wallet_options.observer = metrics; // the same observer: one /metrics for every job
  lc::Wallet wallet(redis, wallet_options);
  lc::JournalConsumerOptions persister_options;
  persister_options.observer = metrics; // each poll reports the journal's lag
  lc::JournalConsumer persister(redis, wallet_options, persister_options);

  example::MetricsHttpServer server([&metrics] { return metrics->render(); }, port);
  std::cout << "serving http://127.0.0.1:" << server.port() << "/metrics for " << serve_for.count()
            << " s\n";

  // Five decisions a second, on a merchant of its own so that runs do not meet.
  const std::string merchant =
      "m" + std::to_string(lc::Clock::now().time_since_epoch().count() % 1000000);
  const auto until = std::chrono::steady_clock::now() + serve_for;
  // room for 2 deductions of 100 (a load replaces the account: the same load again is harmless)
  example::with_same_id([&] { return wallet.load(merchant, lc::AccountSnapshot{250, 1, 0}); });
  // What the calls answered, to hold against what the observer counted: a call re-sent after a
  // lost reply (example::with_same_id) is observed again, as its replay.
  int payments_allowed = 0;   // decisions answered allowed, replays included
  std::set<std::string> paid; // ... their distinct ids
  int sms_allowed = 0;
  int deducted_now = 0; // deductions answered ok and not replayed
  std::set<std::string> deducted;
  int n = 0;
  do {
    const std::string id = "order-" + merchant + "-" + std::to_string(n++);
    const auto decision = example::with_same_id([&] {
      return limits.consume(lc::Transaction{id, {{"merchant", merchant}}, 100});
    });
    payments_allowed += decision.allowed() ? 1 : 0;
    if (decision.allowed()) {
      paid.insert(id);
    }
    // Calls without an id: not sent again after a lost reply (they would count twice).
    const auto sms =
        example::at_most_once([&] { return limits.take_daily_cap("sms", merchant, 2); });
    sms_allowed += sms && sms->allowed() ? 1 : 0;
    example::at_most_once([&] { return limits.hit_sliding_window("login", merchant, 5, 1s); });
    const auto deduction = example::with_same_id([&] { return wallet.deduct(merchant, id, 100); });
    if (deduction.status == lc::WalletResult::Status::ok) {
      deducted.insert(id);
      deducted_now += deduction.replayed ? 0 : 1;
    }
    try {
      persister.poll([](const std::vector<lc::JournalEvent>&) {}); // a database write goes here
    } catch (const lc::Error& e) {
      if (e.is_input_error() || e.outcome() == lc::Outcome::failed) {
        throw;
      }
      // not answered: what was not acknowledged comes again at a later poll
    }
    std::this_thread::sleep_for(200ms);
  } while (n < 5 || std::chrono::steady_clock::now() < until); // 5 at least: 3 allowed, 2 denied
  // The lag read once more, so that the gauge is fresh whatever the last poll met.
  example::with_same_id([&] { return persister.lag(); });
  example::print_resends();

  // What a scraper sees now, checked.
  const std::string scrape = example::http_get(server.port(), "/metrics");
  std::cout << scrape.substr(scrape.find("\r\n\r\n") + 4);
  example::Checks checks;
  checks.expect(scrape.rfind("HTTP/1.0 200 OK\r\n", 0) == 0, "GET /metrics answers 200");
  const auto has = [&scrape](const std::string& series, int value) {
    return scrape.find(series + " " + std::to_string(value) + "\n") != std::string::npos;
  };
  checks.expect(paid.size() == 3 &&
                    has("limitcounter_decisions_total{op=\"consume\",verdict=\"allowed\","
                        "rule=\"\"}",
                        payments_allowed),
                "3 payments allowed (the merchant's daily count limit), each answer counted");
  checks.expect(sms_allowed <= 2 && has("limitcounter_limiter_decisions_total{kind=\"daily_cap\","
                                        "name=\"sms\",verdict=\"allowed\"}",
                                        sms_allowed),
                "at most 2 SMS allowed (the daily cap), each counted");
  checks.expect(
      deducted.size() == 2 &&
          has("limitcounter_wallet_operations_total{op=\"deduct\",status=\"ok\"}", deducted_now),
      "2 deductions done (the balance), each counted once");
  checks.expect(has("limitcounter_journal_lag_entries{group=\"persister\",partition=\"" +
                        std::to_string(wallet.keys().partition_of(merchant)) + "\"}",
                    0),
                "the persister has read the journal");
  return checks.exit_code();
} catch (const std::exception& e) { // what the helpers throw: alert
  std::cerr << "metrics_server: " << e.what() << '\n';
  return 1;
}
