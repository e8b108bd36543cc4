#pragma once
// The retry policy of one call: which error replies mean "the command did not run, send it
// again", how long to wait before doing so, and the time budget that ends all retrying.
// Pure logic (the caller passes the time): unit-tested without a server.

#include <chrono>
#include <optional>
#include <string_view>

#include <limitcounter/error.hpp>
#include <limitcounter/redis.hpp>
#include <limitcounter/reply.hpp>

namespace limitcounter::detail {

/// What an error reply tells the caller, when it is one of the replies the library reacts to.
enum class ReplyKind {
  final,     ///< any other reply: the command ran (or failed on its own); return it
  transient, ///< LOADING, BUSY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN: it did not run, may succeed
             ///< shortly
  redirect,  ///< MOVED or ASK (cluster only): it did not run, another node serves the slot
  /// NOSCRIPT: the script is not in this node's cache; FCALL's "Function not found": its library
  /// is not loaded; or the server refuses FCALL itself (see `refuses_functions`): it did not run
  noscript,
  noauth, ///< NOAUTH: the server needs a password the options do not give; it did not run
};

/// How `reply` is handled. MOVED/ASK are redirects only on a cluster (`cluster`).
ReplyKind classify(const Reply& reply, bool cluster);

/// Whether an error text is the server refusing FCALL or FUNCTION (LOAD) for this client: the
/// command renamed away ("unknown command"), or an ACL without it (NOPERM). Nothing ran; the
/// scripts are then run by EVALSHA.
bool refuses_functions(std::string_view error);

/// Whether an error text says the command did not run and may succeed shortly: TRYAGAIN,
/// CLUSTERDOWN (a cluster reconfiguring), LOADING (a restarted server reading its data),
/// MASTERDOWN (a replica that lost its master), BUSY (a script runs past
/// busy-reply-threshold; the server refuses other commands until it ends, so a refused write
/// never ran). BUSYGROUP and BUSYKEY are final errors, not transient.
bool is_transient_error(std::string_view error);

/// Thrown when a server kept answering that it cannot run commands now (LOADING, BUSY,
/// MASTERDOWN, TRYAGAIN, CLUSTERDOWN) until the call's budget ran out. Nothing ran; the
/// node's breaker counts it as an infrastructure failure, as it counts a dead server.
class ServerUnavailable : public Error {
public:
  using Error::Error;
};

/// Whether a call that failed with `e` certainly did not run, so that a pipeline keeps it as
/// refused (Outcome::not_sent) and a failure policy may decide in Redis's place: refused until
/// the budget ran out (ServerUnavailable), its node's breaker open, its node unreachable (no
/// connection made, none free in the pool), or its slot served by no node (cluster_down is
/// thrown only when nothing of that call ran: before it is sent, or after replies saying it
/// did not run). Anything else (a timeout, a broken connection, an error reply) may have run.
bool did_not_run(const Error& e);

/// The retry budget of one call, started when the call starts. Nothing is sent again once
/// `budget` has passed: a back-off sleep never runs past the deadline, and the retry it
/// leads to is the last. So a call ends within `budget` plus one attempt (see
/// RedisOptions::call_budget for the whole bound).
class RetryPolicy {
public:
  using Clock = std::chrono::steady_clock;

  /// At most this many redirections (MOVED, ASK, a cluster node that refused the connection)
  /// are followed in one call: they cost no sleep, so the budget alone would not stop a loop.
  static constexpr int max_hops = 6;
  /// The first back-off after a transient reply; each later one doubles.
  static constexpr std::chrono::milliseconds first_backoff{10};

  RetryPolicy(std::chrono::milliseconds budget, Clock::time_point start)
      : deadline_(start + budget) {}

  /// After a transient reply at `now`: how long to sleep before sending again, or nothing
  /// when the budget is spent (the caller gives up). The sleep is the back-off (10 ms,
  /// 20 ms, 40 ms, ...) cut to the time left.
  std::optional<std::chrono::milliseconds> after_transient(Clock::time_point now);
  /// After a redirection at `now`: whether to follow it (budget left and fewer than
  /// `max_hops` followed).
  bool after_hop(Clock::time_point now);
  /// Whether a request that did not run (NOSCRIPT, a stale pooled connection) may be sent
  /// again at `now`.
  bool may_resend(Clock::time_point now) const { return now < deadline_; }

  Clock::time_point deadline() const noexcept { return deadline_; }
  /// Attempts made so far, for error messages (the first send counts).
  int attempts() const noexcept { return 1 + transient_retries_ + hops_; }

private:
  Clock::time_point deadline_;
  int transient_retries_ = 0;
  int hops_ = 0;
};

/// The sends of one call marked Resend::same_id whose replies were lost (RetryOptions),
/// started when the call starts: at most `max_attempts` sends, none starting past `budget`.
class ResendPolicy {
public:
  using Clock = std::chrono::steady_clock;

  ResendPolicy(const RetryOptions& options, Clock::time_point start)
      : options_(options), deadline_(start + options.budget) {}

  /// After a send at `now` whose reply was lost (or, once one was, a send that did not run):
  /// the pause before sending again, or nothing when the sends or the budget are spent.
  /// `jitter`, from [0, 1), draws the pause between half the back-off and all of it; the
  /// back-off doubles per resend and the pause is cut to the time left.
  std::optional<std::chrono::milliseconds> after_lost(Clock::time_point now, double jitter);

  /// Sends made or allowed so far, the first included.
  int sends() const noexcept { return sends_; }
  std::chrono::milliseconds budget() const noexcept { return options_.budget; }

private:
  RetryOptions options_;
  Clock::time_point deadline_;
  int sends_ = 1;
};

} // namespace limitcounter::detail
