// The examples as a new user runs them (scripts/demo.sh), on a busy host: each one against a
// private redis-server through a fault proxy that holds back 5 % of the server's reply chunks
// for 200 ms. The library's 50 ms command timeout then expires on calls that ran, so every
// example meets Outcome::unknown and must handle it as its comments say; each must still
// exit 0 (its self-checks read the server's state: balances, counters, packets, payouts).

#include <array>
#include <cstdio>
#include <regex>
#include <sstream>
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include "support/fault_proxy.hpp"
#include "support/redis_server.hpp"

namespace lc = limitcounter;
using namespace std::chrono_literals;

namespace {

struct Run {
  int exit_code = -1;
  std::string output;
};

// Runs `command` through the shell and returns its exit code and its output (stderr included).
Run run(const std::string& command) {
  Run result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer{};
  std::size_t read = 0;
  while ((read = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    result.output.append(buffer.data(), read);
  }
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// The calls an example's summary line says met a lost reply (re-sent, or counted as maybe).
int lost_replies(const std::string& output) {
  static const std::regex summary("after a lost reply: ([0-9]+);.*counted conservatively\\): "
                                  "([0-9]+)");
  std::smatch match;
  if (!std::regex_search(output, match, summary)) {
    return 0;
  }
  return std::stoi(match[1]) + std::stoi(match[2]);
}

} // namespace

TEST_CASE("every example passes its checks while 5 % of the reply chunks wait 200 ms", "[fault]") {
  std::vector<std::string> examples;
  std::istringstream names(LIMITCOUNTER_EXAMPLES);
  for (std::string name; names >> name;) {
    examples.push_back(name);
  }
  REQUIRE(examples.size() >= 5);
  for (const std::uint64_t seed : {1, 2, 3}) {
    lc::testing::RedisServer server;
    lc::testing::FaultProxy proxy(server);
    proxy.delay_reply_chunks(seed, 0.05, 200ms);
    const std::string uri = "redis://127.0.0.1:" + std::to_string(proxy.port());
    int lost = 0;
    for (const auto& example : examples) {
      const Run result = run(std::string(LIMITCOUNTER_EXAMPLES_DIR) + "/" + example + " " + uri);
      INFO("seed " << seed << ", " << example << " printed:\n" << result.output);
      CHECK(result.exit_code == 0);
      lost += lost_replies(result.output);
    }
    INFO("seed " << seed);
    // The fault took effect: replies were held back, and calls met a lost reply.
    CHECK(proxy.delayed_chunks() > 0);
    CHECK(lost > 0);
  }
}
