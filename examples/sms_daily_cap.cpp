// SMS daily cap: an account may send at most 5 SMS a day (Asia/Shanghai days).
// Refused attempts are not counted; tomorrow starts afresh.
//
//   sms_daily_cap [redis-uri]

#include <chrono>
#include <iostream>
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
  int sent = 0;
  for (int attempt = 1; attempt <= 7; ++attempt) {
    const auto decision = limits.take_daily_cap("sms", account, 5, now);
    std::cout << "  SMS " << attempt << ": " << (decision.allowed ? "sent   " : "refused")
              << "  used " << decision.used << ", remaining " << decision.remaining << '\n';
    sent += decision.allowed ? 1 : 0;
  }
  checks.expect(sent == 5, "exactly 5 of 7 sent today");
  checks.expect(limits.take_daily_cap("sms", account, 5, now).used == 5,
                "refused attempts were not counted");
  const auto tomorrow = limits.take_daily_cap("sms", account, 5, now + 24h);
  checks.expect(tomorrow.allowed && tomorrow.used == 1,
                "tomorrow (" + tomorrow.window.id + ") starts afresh");
  return checks.exit_code();
} catch (const lc::Error& e) {
  std::cerr << "sms_daily_cap: " << e.what() << '\n';
  return 1;
}
