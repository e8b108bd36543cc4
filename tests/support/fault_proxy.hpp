#pragma once
// A TCP fault proxy for fault tests: sits on a free loopback port between the library and a
// real redis-server (or each node of a Redis Cluster) and, per command, forwards it, loses its
// reply, delays it, cuts the connection half way through it, or answers in the server's place.
//
// It reads RESP on both sides: complete request arrays from the client (a pipeline of many
// commands in one write is taken apart and handled in order) and exactly one complete reply
// per forwarded command from the server (nested arrays included), so a fault applies to one
// command and the replies of the others stay in order around it. Not a mock: every command
// that is forwarded runs on the real server, so a test proves from the server's side (the key
// written, INFO commandstats) whether a command whose reply was lost ran.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <limitcounter/redis.hpp>

namespace limitcounter::testing {

class RedisCluster;
class RedisServer;

/// What the proxy does with one command.
enum class Fault {
  /// Sends it to the server and its reply back to the client (the default).
  forward,
  /// Sends it (the server runs it) and discards its reply; the connection is then held
  /// silent: later commands still go to the server but no reply reaches the client, which
  /// times out (Outcome::unknown). The lost reply after the command ran.
  drop_reply,
  /// Sends it and holds its reply (and every reply after it, which stays in order) for the
  /// rule's `delay`, then sends it intact.
  delay_reply,
  /// Sends it, passes on only the first half of its reply's bytes, then closes both sockets:
  /// the command ran, the client sees a broken connection mid-reply.
  cut_mid_reply,
  /// Closes both sockets instead of sending it: it did not run. (Commands of the same
  /// pipeline already sent before it did run; their replies are lost with the connection.)
  close_before_forward,
  /// Takes it and never sends it nor answers it; later commands on that connection are not
  /// sent either. The client times out; nothing ran.
  blackhole,
  /// Answers it with the rule's `error` (a RESP error reply) without sending it: did not run.
  error_reply,
  /// Holds it for the rule's `delay`, then sends it: it runs late, as over a slow network (the
  /// connection's traffic waits behind it).
  delay_forward,
};

/// "drop_reply", "delay_reply", ... for reports and failure messages.
const char* to_string(Fault fault) noexcept;

/// Error texts (without the leading '-') that a real server gives while it cannot run a
/// command for a while; every one means "did not run".
inline const std::string loading_error = "LOADING Redis is loading the dataset in memory";
inline const std::string busy_error =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
inline const std::string masterdown_error =
    "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.";
inline const std::string tryagain_error = "TRYAGAIN Multiple keys request during rehashing of slot";
inline const std::string clusterdown_error = "CLUSTERDOWN The cluster is down";

/// Selects commands by their argv (argv[0] is the command name as the client sent it).
using CommandMatcher = std::function<bool(const std::vector<std::string>& argv)>;

/// Every command.
CommandMatcher any_command();
/// Commands named `name`, compared case-insensitively ("EVALSHA", "set").
CommandMatcher command_named(std::string name);
/// EVALSHA, EVAL and FCALL calls whose first key starts with `prefix`: a test targets its own
/// script calls (e.g. keys under its unique_prefix()) and leaves setup commands alone.
CommandMatcher script_call_with_key_prefix(std::string prefix);

/// A scripted fault: the first rule (in the order added) that matches a command and has uses
/// left applies to it and spends one use.
struct FaultRule {
  CommandMatcher matches; ///< empty: every command
  Fault fault = Fault::forward;
  /// How many commands it applies to; then it is spent.
  int times = 1;
  /// For delay_reply: how long the reply is held; for delay_forward, the command.
  std::chrono::milliseconds delay{100};
  /// For error_reply: the error text, without the leading '-'.
  std::string error = loading_error;
};

/// Random faults for a seeded schedule: each command that `matches` (and no rule took) gets
/// fault `f` with probability `probability[f]` (the probabilities add up to at most 1; the
/// rest is forwarded). The same seed and the same command sequence give the same faults.
struct FaultMix {
  std::map<Fault, double> probability;
  CommandMatcher matches = any_command();
  std::chrono::milliseconds delay{100};
  /// error_reply draws one of these (with the same seeded generator).
  std::vector<std::string> errors{loading_error, busy_error, masterdown_error, tryagain_error,
                                  clusterdown_error};
};

/// How `refuse_connections` refuses.
enum class Refusal {
  stop_listening,   ///< the port is closed: a connect fails (connect_failed, not sent)
  accept_and_close, ///< a connect succeeds, then the proxy closes it at once, unread
};

/// One proxy in front of one server. Thread-safe: rules may be changed while clients run.
/// An acceptor thread and one thread per client connection; the destructor closes every
/// connection and joins every thread.
class FaultProxy {
public:
  /// Listens on a free port of 127.0.0.1 (never 6379) and forwards each client connection
  /// to `target.host:target.port` over a connection of its own. Throws std::runtime_error if
  /// it cannot listen.
  explicit FaultProxy(RedisOptions target);
  explicit FaultProxy(const RedisServer& server);
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  int port() const noexcept;
  /// The target's options with the port (and host) of the proxy: a client through the proxy.
  RedisOptions options() const;

  /// Adds a rule after the existing ones.
  void add_rule(FaultRule rule);
  /// Applies random faults from now on (replacing an earlier schedule); rules still come first.
  void schedule(std::uint64_t seed, FaultMix mix);
  /// From now on, holds back each chunk of replies (those that one read from the server
  /// completes: a pipeline's replies often come in one) with probability `probability`, for
  /// `delay`, and every reply after it on that connection, which stay in order: a busy host.
  /// On top of rules and the schedule; the same seed and sequence of chunks give the same
  /// delays. A probability of 0 turns it off.
  void delay_reply_chunks(std::uint64_t seed, double probability, std::chrono::milliseconds delay);
  /// How many reply chunks delay_reply_chunks held back.
  std::size_t delayed_chunks() const;
  /// Removes every rule, the schedule and the chunk delays: everything is forwarded again.
  void clear();

  /// While true, new connections are refused as `how` says; existing ones are not touched.
  /// In force when it returns.
  void refuse_connections(bool refuse, Refusal how = Refusal::stop_listening);
  /// Closes every open client connection (and its server connection) now; returns once they
  /// are closed. Replies held by delay_reply are lost with them.
  void cut_all();

  /// How many commands got `fault` (by a rule or the schedule); forward counts nothing.
  std::size_t injected(Fault fault) const;
  /// How many commands were sent to the server (including those whose reply was then
  /// dropped, delayed or cut).
  std::size_t forwarded() const;

  /// Rewrites a reply before it goes to the client: `argv` is the command it answers,
  /// `reply` its complete RESP bytes; returns the bytes to send. Used by ClusterFaultProxy
  /// to put proxy addresses into CLUSTER SLOTS and MOVED/ASK.
  using ReplyRewriter =
      std::function<std::string(const std::vector<std::string>& argv, std::string reply)>;
  void set_reply_rewriter(ReplyRewriter rewriter);

  struct State;

private:
  std::unique_ptr<State> state_;
};

/// One FaultProxy per node of a cluster started by RedisCluster. Replies are rewritten so
/// the client only ever learns proxy addresses: the node ports in CLUSTER SLOTS and in
/// `-MOVED slot host:port` / `-ASK slot host:port` become the ports of their proxies.
/// (CLUSTER NODES and CLUSTER SHARDS are passed on as they are.)
class ClusterFaultProxy {
public:
  explicit ClusterFaultProxy(const RedisCluster& cluster);

  /// The cluster's options with the proxies as seeds.
  RedisOptions options() const;
  /// The proxy in front of `node` (a node of the cluster).
  FaultProxy& proxy_of(const RedisServer& node);
  /// cut_all() on every proxy.
  void cut_all();

private:
  RedisOptions options_;
  std::map<int, std::unique_ptr<FaultProxy>> by_node_port_;
};

} // namespace limitcounter::testing
