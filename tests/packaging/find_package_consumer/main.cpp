// A program outside the project, built against limitcounter (installed, or added as a
// subdirectory): it includes the umbrella header, links limitcounter::limitcounter and
// checks one zone-aware fact, and prints the version it links ("limitcounter 0.2.0"). It also
// makes a TLS `Redis` and calls it, so that a static link needs the Redis code and with it
// hiredis and OpenSSL: a missing -lhiredis, -lssl or -lcrypto fails the link. No server is
// needed: the call goes to port 1 of the loopback (never 6379) and must fail to connect.
#include <chrono>
#include <cstring>
#include <iostream>

#include <limitcounter/limitcounter.hpp>

int main() {
  // The library's version and the headers' agree (one project, one VERSION).
  std::cout << "limitcounter " << limitcounter::version() << '\n';
  if (std::strcmp(limitcounter::version(), LIMITCOUNTER_VERSION_STRING) != 0 ||
      LIMITCOUNTER_VERSION != LIMITCOUNTER_VERSION_MAJOR * 10000 +
                                  LIMITCOUNTER_VERSION_MINOR * 100 + LIMITCOUNTER_VERSION_PATCH) {
    std::cerr << "headers say " << LIMITCOUNTER_VERSION_STRING << '\n';
    return 1;
  }
  // 1636648200 s after the epoch is 2021-11-11T16:30:00Z, which is 2021-11-12 00:30 in
  // Shanghai (UTC+8): the Shanghai day is already the 12th.
  const std::chrono::system_clock::time_point at{std::chrono::seconds{1636648200}};
  const auto window = limitcounter::Calendar("Asia/Shanghai").window(limitcounter::Period::day, at);
  std::cout << "Asia/Shanghai day window of 2021-11-11T16:30:00Z: " << window.id << '\n';
  if (window.id != "20211112") {
    std::cerr << "expected 20211112\n";
    return 1;
  }
  try {
    limitcounter::Redis redis("rediss://127.0.0.1:1?verify_peer=no");
    redis.command({"PING"});
    std::cerr << "PING to 127.0.0.1:1 answered\n";
    return 1;
  } catch (const limitcounter::Error& e) {
    std::cout << "TLS Redis at 127.0.0.1:1: " << e.what() << '\n';
    if (e.code() != limitcounter::errc::connect_failed) {
      std::cerr << "expected connect_failed\n";
      return 1;
    }
  }
  return 0;
}
