// SMS daily cap: an account may send at most 5 SMS a day (Asia/Shanghai days).
// Refused attempts are not counted; tomorrow starts afresh.
//
//   sms_daily_cap [redis-uri]

#include <chrono>
#include <iostream>
#include <optional>
#include <string>

#include <limitcounter/limitcounter.hpp>

#include "example_support.hpp"

namespace lc = limitcounter;
using namespace std::chrono_literals;

int main(int argc, char** argv) try {
  lc::Redis redis(example::redis_uri(argc, argv));
  lc::LimitCounterOptions options;
  options.key_prefix = "demo:sms:";
  lc::LimitCounter limits(redis, lc::Calendar("Asia/Shanghai"), options);
  example::Checks checks;

  const auto now = lc::Clock::now();
  const std::string account = "acct-" + std::to_string(now.time_since_epoch().count() % 1000000);
  // A take has no id: after a lost reply it is not sent again (it might take twice). The SMS
  // is not sent and the take is counted as if it happened: the account may lose one SMS of
  // the day, the cap is never passed.
  int sent = 0;
  int refused = 0;
  int lost = 0;
  for (int attempt = 1; refused < 2 && attempt <= 20; ++attempt) {
    const auto decision =
        example::at_most_once([&] { return limits.take_daily_cap("sms", account, 5, now); });
    if (!decision) {
      ++lost;
      std::cout << "  SMS " << attempt << ": not sent (the reply was lost; may be counted)\n";
      continue;
    }
    std::cout << "  SMS " << attempt << ": " << (decision->allowed() ? "sent   " : "refused")
              << "  used " << decision->used << ", remaining " << decision->remaining << '\n';
    sent += decision->allowed() ? 1 : 0;
    refused += decision->allowed() ? 0 : 1;
  }
  const auto used =
      example::with_same_id([&] { return limits.cap_usage("sms", account, now); }).used;
  checks.expect(sent <= 5 && sent + lost >= 5, std::to_string(sent) + " sent today, at most 5 (" +
                                                   std::to_string(lost) +
                                                   " lost replies counted as taken)");
  checks.expect(refused >= 2 && used == 5,
                "refused attempts were not counted: used " + std::to_string(used) + " of 5");
  int lost_tomorrow = 0;
  std::optional<lc::CapDecision> tomorrow;
  while (!tomorrow && lost_tomorrow < 10) {
    tomorrow =
        example::at_most_once([&] { return limits.take_daily_cap("sms", account, 5, now + 24h); });
    lost_tomorrow += tomorrow ? 0 : 1;
  }
  checks.expect(tomorrow && tomorrow->allowed() && tomorrow->used >= 1 &&
                    tomorrow->used <= 1 + lost_tomorrow,
                "tomorrow starts afresh");
  example::print_resends();
  return checks.exit_code();
} catch (const std::exception& e) { // what the helpers throw: alert
  std::cerr << "sms_daily_cap: " << e.what() << '\n';
  return 1;
}
