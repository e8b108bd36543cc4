#pragma once
// Redis Sentinel: which server is the master of a name, and when to ask again. The reply
// parsing and the "ask again" decisions are pure (unit-tested); SentinelClient does the asking.

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <limitcounter/error.hpp>
#include <limitcounter/redis.hpp>
#include <limitcounter/reply.hpp>

#include "redis/retry_policy.hpp"
#include "redis/router.hpp"

namespace limitcounter::detail {

class TlsContext;

/// The address in a reply to `SENTINEL GET-MASTER-ADDR-BY-NAME` (an array of host and port), or
/// nullopt when the reply is nil: the sentinel does not know the name. Throws
/// Error(protocol_error) for any other shape, an error reply included (the caller reports it).
std::optional<Endpoint> parse_master_addr(const Reply& reply);

/// Whether a `ROLE` reply says "master" (its first element).
bool role_is_master(const Reply& reply);

/// The first element of a `ROLE` reply ("slave", "sentinel", ...), for messages.
std::string role_name(const Reply& reply);

/// Whether a data server's reply says it is a replica now (READONLY, also from inside a
/// script): the command did not run, and the master has moved (a failover demoted it).
bool is_readonly_reply(const Reply& reply);

/// Whether an error of a call to the master should make the library ask the sentinels again:
/// the master refused the connection, broke it, or did not answer in time (a failover may be
/// under way). Input errors, server error replies and an exhausted pool do not.
bool calls_for_rediscovery(const Error& error);

/// Checks the sentinel options: every seed "host:port" (named when bad), a master name (1 to
/// 256 bytes, the characters of an id: `detail::id_text_problem`), and no cluster seeds
/// beside them. Throws Error
/// (invalid_argument). Returns the parsed seeds.
std::vector<Endpoint> check_sentinel_options(const RedisOptions& options);

/// Asks the sentinels of `options` where the master of `options.sentinel_master` is.
/// Thread-safe; every question opens a fresh connection (sentinels are asked rarely).
class SentinelClient {
public:
  /// Checks the options (see check_sentinel_options) and, with TLS, reads its files (see
  /// TlsContext: throws Error(invalid_argument) naming one that cannot be used); no I/O.
  explicit SentinelClient(const RedisOptions& options);

  /// Why an address a sentinel gave is not used (e.g. it answers ROLE slave), or nullopt to
  /// accept it.
  using Confirm = std::function<std::optional<std::string>(const Endpoint&)>;

  /// Asks the sentinels in turn (the one that last answered first) with
  /// `SENTINEL GET-MASTER-ADDR-BY-NAME`, and returns the first address `confirm` accepts.
  /// After the first sentinel, stops once `policy` allows no more sending. Throws
  /// Error(connect_failed, Outcome::not_sent) naming the master and each sentinel asked with
  /// what it answered: no connection, "does not know a master named ...", an error reply, or
  /// the reason `confirm` gave.
  Endpoint master(const RetryPolicy& policy, const Confirm& confirm);

  /// "master 'name' (sentinels a:1,b:2)", for messages.
  const std::string& description() const noexcept { return description_; }

private:
  RedisOptions sentinel_options_; // AUTH with the sentinel password, no SELECT
  // The TLS options apply to the sentinels too; their files are read once, here (null without
  // TLS).
  std::shared_ptr<const TlsContext> tls_;
  std::string master_name_;
  std::string description_;
  std::mutex mutex_;
  std::vector<Endpoint> sentinels_; // the one that answered last first
};

} // namespace limitcounter::detail
