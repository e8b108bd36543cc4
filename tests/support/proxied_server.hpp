#pragma once
// A private redis-server behind a fault proxy, for fault tests: a direct client for the
// server's side of the story, the scripts loaded, and options for a client through the proxy.

#include <chrono>
#include <string>

#include <limitcounter/limit_counter.hpp>

#include "support/fault_proxy.hpp"
#include "support/redis_server.hpp"

namespace limitcounter::testing {

struct ProxiedServer {
  RedisServer server;
  FaultProxy proxy{server};
  Redis direct{server.options()};
  std::string prefix = unique_prefix();

  ProxiedServer() {
    // A first script call would come back NOSCRIPT or "Function not found" (it did not run):
    // the reply a test loses or holds is that of a script that runs.
    load_every_script(direct);
  }

  /// A client through the proxy that waits `timeout` for a reply; no breaker (these tests are
  /// about outcomes, not the breaker) and no resend after a lost reply (they see the lost reply
  /// and retry as a host would; tests/fault/resend_test.cpp covers the library's resends).
  RedisOptions through_proxy(std::chrono::milliseconds timeout) const {
    RedisOptions options = proxy.options();
    options.command_timeout = timeout;
    options.breaker_failures = 0;
    options.retry.max_attempts = 1;
    return options;
  }

  /// The state of `id`'s record under `options` as the server keeps it (read directly, not
  /// through the proxy); none without one.
  TransactionState record_state(const LimitCounterOptions& options, const std::string& id) {
    LimitCounter reader(direct, Calendar("UTC"), options);
    const auto record = reader.transaction_record(id);
    return record ? record->state : TransactionState::none;
  }
};

} // namespace limitcounter::testing
