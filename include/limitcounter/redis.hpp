#pragma once
// Redis: the connection shared by every domain object. A thread-safe pool of
// connections (plain or TLS) to one server, or to each node of a cluster.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <limitcounter/error.hpp>
#include <limitcounter/reply.hpp>
#include <limitcounter/script.hpp>

namespace limitcounter {

/// TLS for every connection (`rediss://`; see docs/CONNECTION.md, "TLS"). OpenSSL does the
/// TLS; the server's certificate is verified by default. Checked when `Redis` is constructed:
/// a file that cannot be read or a key that does not match its certificate throws `Error`
/// (invalid_argument) naming the path; a field set while `enabled` is false throws too, so that
/// a forgotten `enabled` never sends in plaintext. Not available over `unix_socket`. With
/// `sentinels`, these options apply to the sentinels and the master alike. The TCP connect
/// and the handshake end by one deadline, `connect_timeout`.
struct TlsOptions {
  bool enabled = false; ///< connect with TLS (1.2 or newer); set by `rediss://`
  /// PEM file of the CA certificates that may sign the server's certificate. With neither
  /// `ca_file` nor `ca_dir`, the system's default CA store is used.
  std::string ca_file;
  std::string ca_dir; ///< directory of hashed PEM CA certificates (`openssl rehash`)
  /// PEM client certificate (chain), for a server started with `tls-auth-clients yes`.
  std::string cert_file;
  /// PEM private key of `cert_file` (unencrypted); empty: read from `cert_file`. Needs `cert_file`.
  std::string key_file;
  /// The name sent as SNI and verified against the server's certificate (a DNS name or an IP
  /// address). Empty: the host connected to (on a cluster, each node's host as the cluster names
  /// it, so a certificate must then carry every node's address, or set this to a name that they
  /// all carry).
  std::string server_name;
  /// Verify the server's certificate chain against the CAs and its name against
  /// `server_name`; a failure is `Error` (connect_failed) naming the reason. Turn off only for
  /// tests: without it, anyone on the path can read and change every request.
  bool verify_peer = true;
};

/// Sending a call again after its reply was lost (Outcome::unknown: a timeout after sending, a
/// connection that broke after the request left), for the calls that are idempotent by id (see
/// `Resend`): the same request again, which replays the first call's result if that one ran.
/// The caller sees Outcome::unknown only when the attempts or the budget are spent. Checked
/// when `Redis` is constructed: max_attempts below 1, or a negative budget or backoff, throws
/// `Error` (invalid_argument) naming the value.
struct RetryOptions {
  /// Sends of one call in all, the first included; 1: a lost reply is never sent again.
  int max_attempts = 3;
  /// No resend starts later than this after the call started (a back-off is cut to end by
  /// then). A call ends by about `budget` plus one attempt (the bound at `Redis`).
  std::chrono::milliseconds budget{1000};
  /// The pause before the first resend, doubled before each later one; each pause is drawn
  /// at random between half of it and all of it, so that callers that lost their replies at
  /// once do not all come back at once.
  std::chrono::milliseconds backoff{20};
};

/// Whether a call may be sent again, unchanged, after its reply was lost.
enum class Resend {
  never,   ///< not idempotent (a counter add, a cap take): a lost reply is Outcome::unknown
  same_id, ///< idempotent by an id it carries, or a read: sent again within `RedisOptions::retry`
};

/// How to reach Redis. Timeouts are per command and per connection attempt.
struct RedisOptions {
  std::string host = "127.0.0.1"; ///< server name or address (standalone)
  int port = 6379;                ///< server TCP port, 1..65535 (standalone)
  std::string unix_socket;        ///< when set, used instead of host and port
  std::string user;               ///< ACL user name; empty means the default user
  /// AUTH password; never logged nor put into an error message or observer event: an error
  /// reply to AUTH keeps only its code (`ERR`, `WRONGPASS`), as the server's words may repeat it
  std::string password;
  int db = 0;                                     ///< SELECT index (standalone only)
  std::chrono::milliseconds connect_timeout{100}; ///< bound of one connection attempt; > 0
  std::chrono::milliseconds command_timeout{50};  ///< bound of each wait to read or write; > 0
  /// The retry budget of one call (0: the same as `command_timeout`). A call re-sends a
  /// request that did not run (see "Retries and the time budget" at `Redis`) only while less
  /// than `call_budget` has passed since the call started; back-off sleeps are cut to end by
  /// then. Must not be negative.
  std::chrono::milliseconds call_budget{0};
  /// How long a caller waits for a free connection when all `pool_size` are busy, then
  /// pool_exhausted (not sent). Waiting sends nothing, so it is long by default: a burst of more
  /// threads than connections queues for its turn instead of failing or being decided by a
  /// failure policy on a healthy server.
  std::chrono::milliseconds pool_wait_timeout{1000};
  std::size_t pool_size = 8; ///< connections per server (per node of a cluster); at least 1
  /// Consecutive infrastructure failures of one node (no connection, timeout, broken
  /// connection, a server that needs a password not given, a server still answering LOADING,
  /// BUSY, MASTERDOWN, TRYAGAIN or CLUSTERDOWN when the call's budget ran out) after which
  /// that node's circuit breaker opens: calls that need the node then fail at once with
  /// errc::circuit_open (Outcome::not_sent) instead of each waiting for a timeout. 0 disables
  /// the breakers. There is one breaker per node: a standalone server has one; on a cluster
  /// a stalled master fails only the calls routed to it (by key slot, redirections
  /// included), and the calls to the other masters go on. A call counts once per node it
  /// went to, however often it retried there; a call that ends without reaching a node (no
  /// free connection in the pool) counts for nothing. `eval_pipeline` asks the breaker of
  /// every node it needs before sending anything: if one is open the whole batch throws
  /// circuit_open and nothing was sent to any node (as when a node cannot be connected);
  /// split the batch by key if the calls to healthy nodes must go on. The slot map
  /// (CLUSTER SLOTS) is never asked of a node whose breaker is open.
  int breaker_failures = 5;
  /// How long an open breaker waits before it lets one probe call through (the first call
  /// that needs its node); the probe's success closes it, its failure opens it again.
  std::chrono::milliseconds breaker_pause{1000};
  /// Seed nodes ("host:port", "[v6]:port") of a Redis Cluster; when non-empty, `host`/`port`
  /// are unused and commands are routed by key slot. Every seed is checked when `Redis` is
  /// constructed: one without a port, or with a bad one, throws `Error` (invalid_argument)
  /// naming it.
  std::vector<std::string> cluster_seeds;
  /// Redis Sentinel: seed sentinels ("host:port", "[v6]:port") that monitor the master named
  /// `sentinel_master`. When non-empty, `host`/`port`/`unix_socket` are unused: the first call
  /// asks the sentinels in turn (`SENTINEL GET-MASTER-ADDR-BY-NAME`) and uses the address only
  /// once that server answers `ROLE` as master; `user`, `password` and `db` apply to it. A
  /// READONLY reply (the master was demoted: the command did not run), a refused or broken
  /// connection or a timeout makes the library ask the sentinels again (at most once per
  /// `sentinel_recheck`) and move to the new master, closing the connections to the old one.
  /// A request answered READONLY is sent again to the new master within the call's budget, as
  /// the other "did not run" replies are. No sentinel answering, or none knowing the name, is
  /// Error(connect_failed, Outcome::not_sent) naming the master and what each sentinel said.
  /// Sentinels are asked again only when something fails (no `+switch-master` subscription):
  /// see docs/CONNECTION.md, "Sentinel", for what a failover can lose. Asking is done by the
  /// call that needs it and adds to its time: a new connection to one sentinel and one command
  /// (`connect_timeout` + `command_timeout` at most), the ROLE check of the address it names (a
  /// new connection there), and the next sentinels only while the call's budget lasts. Checked
  /// when `Redis` is constructed: a bad seed, an empty name or cluster seeds as well throw
  /// invalid_argument.
  std::vector<std::string> sentinels;
  std::string sentinel_master; ///< the name the sentinels monitor (`sentinel monitor <name>`)
  /// AUTH password of the sentinels (not of the master); never logged
  std::string sentinel_password;
  /// The shortest time between two questions to the sentinels after a failure (many threads
  /// that fail at once ask once). Must not be negative.
  std::chrono::milliseconds sentinel_recheck{100};
  /// Every new connection (to each node of a cluster too) checks the server once, with
  /// `INFO server`, `INFO memory` and `COMMAND INFO evalsha script|load hget hmget hset` in one
  /// round trip, and refuses it with `Error` (connect_failed, Outcome::not_sent) naming the
  /// server's version, a missing command or the policy when it is older than Redis 7.0 (the
  /// scripts use PEXPIREAT ... NX / GT), when it lacks one of those commands (renamed or
  /// disabled with rename-command), or when it has a `maxmemory` above 0
  /// with a `maxmemory-policy` other than `noeviction`: Redis would then evict keys under memory
  /// pressure, and an evicted counter resets a limit, an evicted balance or order record loses
  /// money. Set this to true only to accept that risk (e.g. a cache-only deployment of counters
  /// you can afford to lose). The version is never waived.
  bool allow_evicting_server = false;
  /// TLS for every connection, every cluster node included; off by default.
  TlsOptions tls;
  /// Resending the calls idempotent by id whose reply was lost (3 sends within 1 s by
  /// default); see `RetryOptions` and "Lost replies" at `Redis`.
  RetryOptions retry;

  /// Parses `redis://[user:password@]host[:port][/db]`, `redis://:password@host:port`,
  /// `redis://[::1]:6380`, `unix:///path/to/socket[?db=N]` and
  /// `redis-cluster://[user:password@]host:port,host:port,...` and
  /// `redis-sentinel://[user:password@]host[:port],host[:port],.../master-name[/db][?db=N]`
  /// (sentinel ports default to 26379; user and password are the master's, the sentinels' own
  /// password is `sentinel_password`). `rediss://` and `rediss-cluster://` are `redis://` and
  /// `redis-cluster://` over TLS (`tls.enabled`), with optional query parameters setting the
  /// other `tls` fields: `?ca_file=PATH&ca_dir=PATH&cert_file=PATH&key_file=PATH&`
  /// `server_name=NAME&verify_peer=no` (values percent-decoded; write an `@` in a path as `%40`).
  /// User and password may be percent-encoded; in `unix://` the userinfo ends at the last `@/`.
  /// Throws `Error` (invalid_argument) naming the part that is wrong without echoing text that
  /// may hold a secret: never the userinfo, a query value, a query key other than a plain
  /// lower-case name, nor a port or db that is not a number.
  static RedisOptions from_uri(std::string_view uri);
};

/// One command of a pipeline: the script and its KEYS[] and ARGV[].
struct ScriptCall {
  const Script* script = nullptr; ///< the script to run; must outlive the call
  std::vector<std::string> keys;  ///< its KEYS[]
  std::vector<std::string> args;  ///< its ARGV[]
  Resend resend = Resend::never;  ///< whether it may be sent again after a lost reply
};

/// A handle to a pool of Redis connections. Copies share the pool; copy it
/// freely into the domain objects. All member functions are thread-safe.
///
/// Errors: every function throws `Error`. `Error::outcome()` says whether the
/// command was not sent, failed on the server, or may have run:
/// - not sent (Outcome::not_sent): no connection (connect_failed; with `sentinels` also no
///   sentinel naming a usable master), a server that
///   answers NOAUTH because it needs a password the options do not give (connect_failed;
///   the message names the server, never a password), no free connection within
///   `pool_wait_timeout` (pool_exhausted), a server still answering LOADING, BUSY,
///   MASTERDOWN, TRYAGAIN or CLUSTERDOWN (with `sentinels`, READONLY) when the call's budget ran
///   out (server_error, or
///   cluster_down on a cluster), or the request could not be written at all. A pooled connection
///   that the server closed while it was idle is found before anything is sent (its socket shows
///   the EOF) and replaced; if it is only found because writing the request fails before a single
///   byte left, the request is sent once more on another connection (the server never saw the first
///   attempt).
/// - failed (Outcome::failed): Redis answered with an error (server_error).
/// - may have run (Outcome::unknown): a timeout after sending, or a connection
///   that broke after a byte of the request left, even when the server closed it
///   without answering (it may have run the command and then been killed).
///   Sent again only for a call marked Resend::same_id (see "Lost replies" below); else the
///   caller retries with the same id.
/// A connection that timed out or failed is closed and discarded, never
/// returned to the pool. The library never raises SIGPIPE: the host need not
/// ignore it.
///
/// `command_timeout` bounds each wait for bytes from the server (SO_RCVTIMEO), and
/// each wait to write; `connect_timeout` bounds connecting. Both must be positive.
///
/// Retries and the time budget. A request is sent again only when the server's answer
/// says it did not run: LOADING, BUSY (a script runs; the server refused this command),
/// MASTERDOWN, TRYAGAIN and CLUSTERDOWN after a back-off of 10 ms, 20 ms, 40 ms, ...;
/// NOSCRIPT (and FCALL's "Function not found") after loading the script; MOVED and ASK (at most 6
/// redirections); a stale pooled connection or a cluster node that refused the connection; with
/// `sentinels`, READONLY (a demoted master: sent to the master the sentinels name when asked again,
/// or after a back-off as above while they still name this one) and a master that refused the
/// connection (sent again if the sentinels name another). Let T0 be the moment the call starts and
/// B its budget (`call_budget`, or `command_timeout` when that is 0). No request is sent again
/// after T0 + B, and no back-off sleeps past it. So a call ends by T0 + B + one attempt, where one
/// attempt waits at most `pool_wait_timeout` for a connection, `connect_timeout` plus five
/// `command_timeout`s (AUTH, SELECT, and the three replies of the server check, see
/// `allow_evicting_server`) for a new one, and `command_timeout` per write and per read of each of
/// at most seven requests (ASKING, the command, and for a script the server lacks or runs another
/// way, see `eval`: up to two rounds of its load, FUNCTION LOAD and SCRIPT LOAD after a refused
/// one, and the command again). `eval_pipeline` first sends
/// one pipeline to each node it touches, one node after another; each of those counts as one
/// attempt too. With the defaults and a server that answers at once, a server that keeps answering
/// LOADING ends every call in about 50 ms; each such call then counts as one failure for the
/// circuit breaker, which opens after `breaker_failures` of them.
///
/// Lost replies. A call marked Resend::same_id (every money operation of the library: the
/// scripts replay the first result for an id they have seen) whose reply was lost is sent again,
/// unchanged, after a jittered back-off (`RetryOptions`), each send a call as above with its own
/// `call_budget`. A send that did not run, or whose reply was lost again, leads to the next one;
/// the first reply returns (marked replayed by the script when the first send ran). When the
/// attempts or `retry.budget` are spent, or a resend gets an error reply, the call throws
/// Outcome::unknown (the first send may have run) with the first lost reply's code, the number
/// of sends and the last error. So such a call ends by T0 + `retry.budget` + one send. A call
/// marked Resend::never (the default; `command` unless told, counter adds, cap takes,
/// sliding-window hits) is never sent again after a lost reply. Each lost reply counts for the
/// node's breaker.
class Redis {
public:
  /// Connects lazily: nothing is sent until the first call. Throws `Error`
  /// (invalid_argument) naming a bad option (pool_size 0, a timeout not positive, a negative
  /// budget or db, a bad port or cluster seed).
  explicit Redis(RedisOptions options);
  /// Same as `Redis(RedisOptions::from_uri(uri))`.
  explicit Redis(std::string_view uri);
  ~Redis();
  Redis(const Redis&) = default;                ///< shares the pool
  Redis& operator=(const Redis&) = default;     ///< shares the pool
  Redis(Redis&&) noexcept = default;            ///< takes the pool over
  Redis& operator=(Redis&&) noexcept = default; ///< takes the pool over

  /// Runs one command, e.g. `command({"HGETALL", key})`. An error reply is returned as a
  /// `Reply` of type error, not thrown, except the replies that say it did not run: LOADING,
  /// BUSY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN, READONLY with `sentinels` (retried; thrown once
  /// the call's budget is spent) and NOAUTH (thrown at once), as described at `Redis`.
  /// `resend`: Resend::same_id for a command that may run twice with the same effect (a read),
  /// which is then sent again after a lost reply (see "Lost replies").
  Reply command(const std::vector<std::string>& argv, Resend resend = Resend::never);

  /// Runs `argv`, a command without keys that each master must run itself (FUNCTION LIST,
  /// FUNCTION DELETE), on every master: the one server of a standalone or Sentinel Redis; on a
  /// cluster each node that serves a slot (the slot map read first when stale), reached as a
  /// call to one of its slots, so that a MOVED is followed as for any call. Returns each
  /// master's address ("host:port"; a Sentinel's master as its description) with its reply, in
  /// slot order. Error replies are returned as `command` returns them; never resent. A failure
  /// throws for the whole call: the masters before it ran the command. While slots move
  /// between masters, a master may be reached twice (under the address it was asked as) or
  /// missed: for a command that may run again (FUNCTION DELETE), run it again once they settle.
  std::vector<std::pair<std::string, Reply>>
  command_on_masters(const std::vector<std::string>& argv);

  /// Runs `script`: by FCALL of its function when it comes as a Functions library
  /// (`Script::library`), else by EVALSHA. If the server does not have it (NOSCRIPT, or
  /// FCALL's "Function not found"), loads it (SCRIPT LOAD, or FUNCTION LOAD of the library)
  /// and runs it again; nothing ran before. If a server refuses FCALL or FUNCTION LOAD (renamed
  /// away, or an ACL without them), this `Redis` (and its copies) runs every script by EVALSHA
  /// from then on. An error reply from the script throws `Error` (server_error,
  /// Outcome::failed) with the server's text.
  /// `resend`: Resend::same_id only when the script is idempotent by an id in its arguments
  /// (see "Lost replies").
  Reply eval(const Script& script, const std::vector<std::string>& keys,
             const std::vector<std::string>& args, Resend resend = Resend::never);

  /// Sends all `calls` in one pipeline on one connection and returns one reply per call,
  /// in order. Error replies are returned in place (not thrown), so that one bad call
  /// does not hide the results of the others. Calls answered NOSCRIPT (or "Function not
  /// found", or FCALL refused: see `eval`) did not run: the missing scripts are loaded and just
  /// those calls are sent again in a second pipeline (a third, by EVALSHA, when the server
  /// refused functions meanwhile), so they run (once) after the other calls. A script the server
  /// will not load, or a second pipeline that cannot be sent, leaves an error reply in place of its
  /// calls. Calls refused with LOADING, BUSY, MASTERDOWN, TRYAGAIN or CLUSTERDOWN (or redirected)
  /// are sent again one by one within the call's budget; one still refused when it ends keeps that
  /// error reply in place (it did not run), unless no call of the pipeline ran: then the whole call
  /// throws as `eval` would. On a cluster, calls whose node cannot be reached (a failover) are sent
  /// to their slots' owners after the slot map is read again; one still unreachable (or needing a
  /// node whose breaker is open) keeps an error reply in place the same way. If a connection fails
  /// after its pipeline was sent, the whole pipeline is sent again when every call is
  /// Resend::same_id (see "Lost replies"), else (or once the retry is spent) the whole call throws
  /// Outcome::unknown.
  std::vector<Reply> eval_pipeline(const std::vector<ScriptCall>& calls);

  /// `eval_pipeline(calls)` that fails calls one node at a time: `refusals` gets one entry per
  /// call, the Error that `eval` of that call alone would have thrown for a call that did not
  /// run (Outcome::not_sent: refused until the budget ended, its node unreachable, its
  /// node's breaker open, or on a cluster no node serving its slot) or whose reply was lost
  /// (Outcome::unknown: its node's connection failed after its pipeline was sent; it may have
  /// run), and nothing for the others (their replies, error replies too, are in place). The
  /// other nodes' calls go on. The calls marked Resend::same_id whose reply was lost are sent
  /// again (together, in one pipeline) within `RedisOptions::retry`; the others keep their
  /// Outcome::unknown. When no call ran, the whole call throws, as `eval_pipeline(calls)` does.
  std::vector<Reply> eval_pipeline(const std::vector<ScriptCall>& calls,
                                   std::vector<std::optional<Error>>& refusals);

  /// The options given at construction.
  const RedisOptions& options() const noexcept;
  /// True when connected to a Redis Cluster (seeds given).
  bool is_cluster() const noexcept { return !options().cluster_seeds.empty(); }
  /// True when the master is found through Redis Sentinel (sentinels given).
  bool is_sentinel() const noexcept { return !options().sentinels.empty(); }

  class Impl;

private:
  std::shared_ptr<Impl> impl_;
};

} // namespace limitcounter
