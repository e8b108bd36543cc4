#pragma once
// A private redis-server for tests: started on a free loopback port with no
// persistence, stopped by its pid. Never port 6379.

#include <cstdint>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

#include <limitcounter/redis.hpp>

namespace limitcounter::testing {

/// A server that listens on its TLS port only (`--port 0`): the only way in is TLS.
struct TlsPort {
  std::string ca_file;   ///< CA of the client certificates (--tls-ca-cert-file)
  std::string cert_file; ///< the server's certificate and key
  std::string key_file;
  bool auth_clients = false; ///< --tls-auth-clients: a client certificate is required
  /// The client certificate and key that options() gives when `auth_clients`.
  std::string client_cert_file;
  std::string client_key_file;
};

class RedisServer {
public:
  /// Starts `redis-server` (found on PATH) with `extra_args` appended to its command
  /// line, on a free port of 127.0.0.1; returns once it answers PING. Throws
  /// std::runtime_error if it does not come up within a few seconds.
  explicit RedisServer(std::vector<std::string> extra_args = {});
  /// The same with its TLS port only; port() is that port, and options() connect over TLS
  /// with `tls.ca_file` (and the client certificate when `tls.auth_clients`).
  RedisServer(std::vector<std::string> extra_args, TlsPort tls);
  /// Starts `program` (e.g. "redis-sentinel") with `config_file` as its first argument (it
  /// must be writable: a sentinel rewrites it), then the arguments above and `extra_args`.
  RedisServer(std::string program, std::string config_file, std::vector<std::string> extra_args);
  /// Kills the server by its pid (SIGKILL unless already stopped) and reaps it.
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const noexcept { return port_; }
  pid_t pid() const noexcept { return pid_; }
  /// `redis://127.0.0.1:<port>` (without TLS)
  std::string uri() const;
  /// Options for this server with generous test timeouts (a loaded CI machine).
  RedisOptions options() const;

  /// Stops the server (SIGTERM, then waits), for fault tests.
  void stop();
  /// Starts it again on the same port with the same arguments.
  void restart();
  /// Kills the server at once (SIGKILL), as a crash would, and reaps it.
  void kill();

private:
  RedisServer(std::string program, std::string config_file, std::vector<std::string> extra_args,
              std::optional<TlsPort> tls);
  void start();
  bool answers_ping() const;
  std::string program_ = "redis-server";
  std::string config_file_;
  std::vector<std::string> extra_args_;
  std::optional<TlsPort> tls_;
  int port_ = 0;
  pid_t pid_ = -1;
};

/// The server shared by all tests of one test binary, started on first use and
/// stopped when the binary exits.
RedisServer& shared_server();

/// The number after `head` in `node`'s INFO `section` ("errorstat_TRYAGAIN:count=" in
/// errorstats, "cmdstat_asking:calls=" in commandstats); 0 when the line is absent.
std::int64_t info_count(const RedisServer& node, const std::string& section,
                        const std::string& head);

/// A key prefix unique to this call within the process (`t<N>:`), so tests on the
/// shared server never see each other's keys.
std::string unique_prefix();

/// Loads every embedded script into the server `node` talks to: SCRIPT LOAD of each, and
/// FUNCTION LOAD of each library (a replica refuses that: it gets its master's). A fault test's
/// first script call on a key is then never answered NOSCRIPT or "Function not found" (which
/// did not run, and would be one call more on the key for the proxy to fault).
void load_every_script(Redis& node);

} // namespace limitcounter::testing
