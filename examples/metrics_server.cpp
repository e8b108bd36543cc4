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
  wallet.load(merchant, lc::AccountSnapshot{250, 1, 0}); // room for 2 deductions of 100
  int n = 0;
  do {
    const std::string id = "order-" + merchant + "-" + std::to_string(n++);
    limits.consume(lc::Transaction{id, {{"merchant", merchant}}, 100});
    limits.take_daily_cap("sms", merchant, 2);
    limits.hit_sliding_window("login", merchant, 5, 1s);
    wallet.deduct(merchant, id, 100);
    persister.poll([](const std::vector<lc::JournalEvent>&) {}); // a database write goes here
    std::this_thread::sleep_for(200ms);
  } while (n < 5 || std::chrono::steady_clock::now() < until); // 5 at least: 3 allowed, 2 denied

  // What a scraper sees now, checked.
  const std::string scrape = example::http_get(server.port(), "/metrics");
  std::cout << scrape.substr(scrape.find("\r\n\r\n") + 4);
  example::Checks checks;
  checks.expect(scrape.rfind("HTTP/1.0 200 OK\r\n", 0) == 0, "GET /metrics answers 200");
  checks.expect(
      scrape.find(
          "limitcounter_decisions_total{op=\"consume\",verdict=\"allowed\",rule=\"\"} 3\n") !=
          std::string::npos,
      "3 payments allowed (the merchant's daily count limit)");
  checks.expect(scrape.find("limitcounter_limiter_decisions_total{kind=\"daily_cap\",name=\"sms\","
                            "verdict=\"allowed\"} 2\n") != std::string::npos,
                "2 SMS allowed (the daily cap)");
  checks.expect(scrape.find("limitcounter_wallet_operations_total{op=\"deduct\",status=\"ok\"} "
                            "2\n") != std::string::npos,
                "2 deductions done (the balance)");
  checks.expect(scrape.find("limitcounter_journal_lag_entries{group=\"persister\",partition=\"" +
                            std::to_string(wallet.keys().partition_of(merchant)) + "\"} 0\n") !=
                    std::string::npos,
                "the persister has read the journal");
  return checks.exit_code();
} catch (const std::exception& e) {
  std::cerr << "metrics_server: " << e.what() << '\n';
  return 1;
}
