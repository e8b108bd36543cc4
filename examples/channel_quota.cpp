// Channel quotas: Alipay withholding through three banks, counted per day and per
// month in Asia/Shanghai. Each add is one round trip that moves both windows.
//
//   channel_quota [redis-uri]

#include <chrono>
#include <iostream>

#include <limitcounter/limitcounter.hpp>

#include "example_support.hpp"

namespace lc = limitcounter;
using namespace std::chrono_literals;

int main(int argc, char** argv) try {
  lc::Redis redis(example::redis_uri(argc, argv));
  lc::LimitCounterOptions options;
  options.key_prefix = "demo:trans:limit:";
  lc::LimitCounter counter(redis, lc::Calendar("Asia/Shanghai"), options);
  example::Checks checks;

  // One payment every 45 minutes over a day, spread over three banks.
  const auto start = std::chrono::time_point_cast<std::chrono::hours>(lc::Clock::now());
  const lc::Dimension banks[] = {
      {"Ali", "Deduct", "cmb"}, {"Ali", "Deduct", "cib"}, {"Ali", "Deduct", "ccb"}};
  std::int64_t expected_amount[3] = {0, 0, 0};
  std::int64_t expected_count[3] = {0, 0, 0};
  const std::string month_id = counter.calendar().window(lc::Period::month, start).id;
  for (int i = 0; i < 32; ++i) {
    const int bank = i % 3;
    const std::int64_t amount = 1000 + 250 * i; // cents
    const auto totals = counter.add("channel", banks[bank], {lc::Period::day, lc::Period::month}, 1,
                                    amount, start + i * 45min);
    if (totals[1].window.id == month_id) { // the run may cross a month end
      ++expected_count[bank];
      expected_amount[bank] += amount;
    }
  }

  // What the month says, and what each day says.
  std::cout << "Month " << month_id << " in Asia/Shanghai:\n";
  for (int bank = 0; bank < 3; ++bank) {
    const auto month = counter.usage("channel", banks[bank], lc::Period::month, start);
    std::cout << "  " << banks[bank].field() << ": " << month.count << " payments, "
              << month.amount / 100 << "." << (month.amount % 100) / 10 << month.amount % 10
              << " CNY\n";
    // The month holds everything this run added on top of what earlier runs left.
    checks.expect(month.count >= expected_count[bank] && month.amount >= expected_amount[bank],
                  banks[bank].field() + " month total includes this run");
  }

  // A payment at 23:59:59.999 local and one at 00:00 land in different days.
  const auto today = counter.calendar().window(lc::Period::day, lc::Clock::now() + 24h);
  const lc::Dimension edge{"Ali", "Deduct", "edge"};
  const auto before = counter.add("channel", edge, {lc::Period::day}, 1, 1, today.end - 1ms);
  const auto after = counter.add("channel", edge, {lc::Period::day}, 1, 1, today.end);
  std::cout << "Local midnight splits " << before[0].window.id << " and " << after[0].window.id
            << '\n';
  checks.expect(before[0].window.id != after[0].window.id, "midnight starts a new day window");

  std::cout << "Try: redis-cli HGETALL '"
            << counter.keys().window("channel", lc::Period::month, month_id) << "'\n";
  return checks.exit_code();
} catch (const limitcounter::Error& e) {
  std::cerr << "channel_quota: " << e.what() << '\n';
  return 1;
}
