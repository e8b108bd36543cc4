#pragma once
// A private server behind a fault proxy and a client through it with the library's default
// resends after a lost reply (RedisOptions::retry), for the tests that prove the resends.

#include <chrono>
#include <cstddef>

#include <catch2/catch.hpp>

#include "support/fault_proxy.hpp"
#include "support/probe.hpp"
#include "support/proxied_server.hpp"

namespace limitcounter::testing {

struct ResendFixture : ProxiedServer {
  Redis through{resending()};

  // Through the proxy with the library's default resends (through_proxy turns them off).
  RedisOptions resending() const {
    RedisOptions options = through_proxy(std::chrono::milliseconds(300));
    options.retry = limitcounter::RetryOptions{};
    return options;
  }

  /// Loses the replies of the next `times` script calls on this fixture's keys; they run.
  void lose_replies(int times = 1) {
    FaultRule rule;
    rule.matches = evalsha_with_key_prefix(prefix);
    rule.fault = Fault::drop_reply;
    rule.times = times;
    proxy.add_rule(rule);
  }

  /// Runs `call` with its first reply lost and returns its result: the resend absorbed the
  /// loss, and the server ran `scripts` scripts for it (by default the first send and the
  /// resend).
  template <typename Call> auto absorbed(Call&& call, long long scripts = 2) {
    lose_replies();
    const std::size_t lost_before = proxy.injected(Fault::drop_reply);
    const long long before = command_calls(direct, "evalsha");
    auto result = call();
    CHECK(proxy.injected(Fault::drop_reply) - lost_before == 1);
    CHECK(command_calls(direct, "evalsha") - before == scripts);
    return result;
  }
};

} // namespace limitcounter::testing
