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
  const auto month_usage = [&](int bank) {
    return example::with_same_id(
        [&] { return counter.usage("channel", banks[bank], lc::Period::month, start); });
  };
  const std::string month_id = counter.calendar().window(lc::Period::month, start).id;
  lc::Usage before[3];
  for (int bank = 0; bank < 3; ++bank) {
    before[bank] = month_usage(bank);
  }
  // An add has no id: after a lost reply it is not sent again (it might count twice). The
  // host counts it as "maybe" and reconciles it with the totals afterwards.
  lc::Usage sure[3];
  lc::Usage maybe[3];
  for (int i = 0; i < 32; ++i) {
    const int bank = i % 3;
    const std::int64_t amount = 1000 + 250 * i; // cents
    const auto at = start + i * 45min;
    const auto totals = example::at_most_once([&] {
      return counter.add("channel", banks[bank], {lc::Period::day, lc::Period::month}, 1, amount,
                         at);
    });
    if (counter.calendar().window(lc::Period::month, at).id == month_id) { // may cross a month end
      lc::Usage& tally = totals ? sure[bank] : maybe[bank];
      ++tally.count;
      tally.amount += amount;
    }
  }

  // What the month says, and what each day says.
  std::cout << "Month " << month_id << " in Asia/Shanghai:\n";
  for (int bank = 0; bank < 3; ++bank) {
    const auto month = month_usage(bank);
    std::cout << "  " << banks[bank].field() << ": " << month.count << " payments, "
              << month.amount / 100 << "." << (month.amount % 100) / 10 << month.amount % 10
              << " CNY\n";
    // This run added what it was told, plus some of the adds whose reply was lost (assumes no
    // other run writes this counter meanwhile).
    const std::int64_t added = month.count - before[bank].count;
    const std::int64_t added_amount = month.amount - before[bank].amount;
    checks.expect(added >= sure[bank].count && added <= sure[bank].count + maybe[bank].count &&
                      added_amount >= sure[bank].amount &&
                      added_amount <= sure[bank].amount + maybe[bank].amount,
                  banks[bank].field() + " month total: " + std::to_string(sure[bank].count) +
                      " adds counted, " + std::to_string(added - sure[bank].count) + " of " +
                      std::to_string(maybe[bank].count) + " lost replies had counted too");
  }

  // A payment at 23:59:59.999 local and one at 00:00 land in different days.
  const auto today = counter.calendar().window(lc::Period::day, lc::Clock::now() + 24h);
  const lc::Dimension edge{"Ali", "Deduct", "edge"};
  const auto day_of_add = [&](lc::TimePoint at) {
    const auto totals = example::at_most_once(
        [&] { return counter.add("channel", edge, {lc::Period::day}, 1, 1, at); });
    return totals ? (*totals)[0].window.id : counter.calendar().window(lc::Period::day, at).id;
  };
  const std::string before_midnight = day_of_add(today.end - 1ms);
  const std::string after_midnight = day_of_add(today.end);
  std::cout << "Local midnight splits " << before_midnight << " and " << after_midnight << '\n';
  checks.expect(before_midnight != after_midnight, "midnight starts a new day window");
  example::print_resends();

  std::cout << "Try: redis-cli HGETALL '"
            << counter.keys().window("channel", lc::Period::month, month_id) << "'\n";
  return checks.exit_code();
} catch (const std::exception& e) { // what the helpers throw: alert
  std::cerr << "channel_quota: " << e.what() << '\n';
  return 1;
}
