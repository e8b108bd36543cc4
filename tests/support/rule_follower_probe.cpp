// rule_follower_probe: a separate process that follows a rule store, for the test that two
// processes switch to a new version (tests/redis/rule_store_test.cpp, issue 15 "Checked by").
//
// Usage: rule_follower_probe <redis uri> <key prefix> <store name> <poll interval ms>
// Prints "version <n>" each time its LimitCounter decides by a new version (the version a
// check's Decision reports, so the counter itself is seen switching), then runs until killed.
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <thread>

#include <limitcounter/limit_counter.hpp>
#include <limitcounter/rule_store.hpp>

namespace lc = limitcounter;

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s URI PREFIX STORE POLL_MS\n", argv[0]);
    return 2;
  }
  try {
    lc::Redis redis(argv[1]);
    lc::LimitCounterOptions counter_options;
    counter_options.key_prefix = std::string(argv[2]) + "lim:";
    auto counter =
        std::make_shared<lc::LimitCounter>(redis, lc::Calendar("Asia/Shanghai"), counter_options);
    const auto decided_version = [&] {
      lc::Transaction probe;
      probe.id = "probe";
      probe.attributes = {{"merchant", "m1"}};
      return counter->check(probe).rule_set_version;
    };
    lc::RuleFollowerOptions options;
    options.poll_interval = std::chrono::milliseconds(std::stoll(argv[4]));
    options.on_swap = [&](std::uint64_t) {
      std::printf("version %llu\n", static_cast<unsigned long long>(decided_version()));
      std::fflush(stdout);
    };
    options.on_error = [](const lc::Error& e) { std::fprintf(stderr, "error: %s\n", e.what()); };
    lc::RuleFollower follower(lc::RuleStore(redis, argv[3], lc::RuleStoreOptions{argv[2], 1000}),
                              {counter}, options);
    std::printf("version %llu\n", static_cast<unsigned long long>(decided_version()));
    std::fflush(stdout);
    for (;;) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rule_follower_probe: %s\n", e.what());
    return 1;
  }
}
