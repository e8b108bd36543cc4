// Payment limits of one merchant: per transaction, per day, per month, and a
// per-minute rate; then a refund and an authorize/capture reservation.
//
//   payment_limits [redis-uri]

#include <chrono>
#include <iostream>
#include <string>

#include <limitcounter/limitcounter.hpp>

#include "example_support.hpp"

namespace lc = limitcounter;
using namespace std::chrono_literals;

namespace {

std::string describe(const lc::Decision& decision) {
  if (decision.allowed()) {
    std::string text = "allowed";
    for (const auto& rule : decision.rules) {
      text +=
          "; " + rule.rule + " left " +
          (rule.remaining_amount() ? std::to_string(*rule.remaining_amount()) + " cents"
                                   : std::to_string(rule.remaining_count().value_or(0)) + " txs");
    }
    return text;
  }
  if (!decision.denial) {
    return "refused (cancelled before)";
  }
  const auto& denial = *decision.denial;
  return "denied by " + denial.rule + " (" + std::string(lc::to_string(denial.metric)) +
         ": limit " + std::to_string(denial.limit) + ", used " + std::to_string(denial.used) +
         ", asked " + std::to_string(denial.requested) + ")";
}

} // namespace

int main(int argc, char** argv) try {
  lc::Redis redis(example::redis_uri(argc, argv));
  lc::LimitCounterOptions options;
  options.key_prefix = "demo:limits:";
  // A ready observer: one line per decision, near-limit event and error (metrics hooks).
  options.observer = std::make_shared<lc::StreamObserver>(std::cout);
  lc::LimitCounter limits(redis, lc::Calendar("Asia/Shanghai"), options);
  example::Checks checks;

  const auto now = lc::Clock::now();
  const std::string run = std::to_string(now.time_since_epoch().count());
  const std::string merchant = "shop-" + run.substr(run.size() - 8);

  limits.set_rules(
      lc::RuleSet()
          .add(lc::Rule("single-500").where("merchant").per_transaction().max_amount(500'00))
          .add(lc::Rule("daily-1000").where("merchant").per(lc::Period::day).max_amount(1000'00))
          .add(lc::Rule("monthly-20").where("merchant").per(lc::Period::month).max_count(20)));

  auto payment = [&](const std::string& id, std::int64_t amount) {
    lc::Transaction tx;
    tx.id = merchant + "-" + id;
    tx.attributes = {{"merchant", merchant}, {"channel", "Ali"}};
    tx.amount = amount;
    tx.time = now;
    return tx;
  };

  std::cout << "Merchant " << merchant
            << ": single <= 500.00, day <= 1000.00, month <= 20 payments\n";
  // Every call with an id goes through example::with_same_id: after a lost reply it is sent
  // again with the same id and returns the first decision (`replayed`), counted once.
  const auto consume = [&](const lc::Transaction& tx) {
    return example::with_same_id([&] { return limits.consume(tx); });
  };
  const auto big = consume(payment("p0", 600'00));
  std::cout << "  600.00: " << describe(big) << '\n';
  checks.expect(!big.allowed() && big.denial->rule == "single-500",
                "a 600.00 payment is over the single limit");

  const auto first = consume(payment("p1", 400'00));
  const auto second = consume(payment("p2", 400'00));
  const auto third = consume(payment("p3", 400'00));
  std::cout << "  400.00: " << describe(first) << "\n  400.00: " << describe(second)
            << "\n  400.00: " << describe(third) << '\n';
  checks.expect(first.allowed() && second.allowed() && !third.allowed(),
                "the third 400.00 passes the day");

  const auto retry = consume(payment("p1", 400'00));
  checks.expect(retry.replayed && retry.allowed(), "a retry of p1 is recognised and counted once");

  const auto refund =
      example::with_same_id([&] { return limits.refund(merchant + "-p1", 150'00, "refund-1"); });
  std::cout << "  refund 150.00 of p1: given back " << refund.refunded_now << '\n';
  const auto after_refund = consume(payment("p4", 300'00));
  std::cout << "  300.00: " << describe(after_refund) << '\n';
  checks.expect(after_refund.allowed(), "the refund made room for 300.00");

  // Authorize 50.00, capture 30.00: the other 20.00 comes back.
  limits.set_rules(lc::RuleSet().add(
      lc::Rule("daily-1000").where("merchant").per(lc::Period::day).max_amount(1000'00)));
  const auto hold = example::with_same_id([&] { return limits.reserve(payment("auth-1", 50'00)); });
  std::cout << "  reserve 50.00: " << describe(hold) << '\n';
  const auto captured =
      example::with_same_id([&] { return limits.confirm(merchant + "-auth-1", 30'00); });
  std::cout << "  confirm 30.00: released " << captured.released
            << (captured.replayed ? " (a retry: the first confirm released it)" : "") << '\n';
  checks.expect(hold.allowed() && captured.amount == 30'00 &&
                    (captured.replayed || captured.released == 20'00),
                "confirming 30.00 of 50.00 releases 20.00");
  const auto last = consume(payment("p5", 20'00));
  checks.expect(last.allowed() && last.rules.at(0).remaining_amount() == 0,
                "the day is now exactly full");

  // At most 3 payments in any 60 seconds, a rolling window. A hit has no id: after a lost
  // reply it is not sent again (it might be recorded twice); the payment is refused and the
  // hit counted as if admitted, so the rate is never passed.
  int admitted = 0;
  int refused = 0;
  int lost = 0;
  for (int i = 0; refused < 2 && i < 20; ++i) {
    const auto hit = example::at_most_once(
        [&] { return limits.hit_sliding_window("per-minute", merchant, 3, 60s, now + i * 1s); });
    lost += hit ? 0 : 1;
    admitted += hit && hit->allowed() ? 1 : 0;
    refused += hit && !hit->allowed() ? 1 : 0;
  }
  std::cout << "  rate 3 per 60 s: admitted " << admitted << ", refused " << refused << ", " << lost
            << " lost replies\n";
  checks.expect(admitted <= 3 && admitted + lost >= 3,
                "the rolling window admits 3 (lost replies counted as admitted)");
  example::print_resends();
  return checks.exit_code();
} catch (const std::exception& e) { // what the helpers throw: alert
  std::cerr << "payment_limits: " << e.what() << '\n';
  return 1;
}
