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
  /// How a reply is lost after its command ran: drop_reply (a timeout) or cut_mid_reply (a
  /// connection broken mid-reply); a test may GENERATE both.
  Fault fault = Fault::drop_reply;

  // Through the proxy with the library's default resends (through_proxy turns them off).
  RedisOptions resending() const {
    RedisOptions options = through_proxy(std::chrono::milliseconds(300));
    options.retry = limitcounter::RetryOptions{};
    return options;
  }

  /// Loses the replies of the next `times` script calls on this fixture's keys by `fault`;
  /// they run.
  void lose_replies(int times = 1) {
    FaultRule rule;
    rule.matches = script_call_with_key_prefix(prefix);
    rule.fault = fault;
    rule.times = times;
    proxy.add_rule(rule);
  }

  /// Runs `call` with its first reply lost and returns its result: the resend absorbed the
  /// loss, and the server ran `scripts` scripts for it (by default the first send and the
  /// resend), or with `fewest`, between that many and `scripts` (a pipeline cut mid-reply:
  /// its later calls may not have reached the server before the cut).
  template <typename Call> auto absorbed(Call&& call, long long scripts = 2, long long fewest = 0) {
    lose_replies();
    const std::size_t lost_before = proxy.injected(fault);
    const long long before = script_calls(direct);
    auto result = call();
    CHECK(proxy.injected(fault) - lost_before == 1);
    const long long ran = script_calls(direct) - before;
    CHECK(ran <= scripts);
    CHECK(ran >= (fewest > 0 ? fewest : scripts));
    return result;
  }
};

} // namespace limitcounter::testing
