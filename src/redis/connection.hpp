#pragma once
// One connection to Redis: our own socket, plain or TLS (transport.hpp), with our own RESP2
// encoding and reply parser (resp.hpp). Any I/O failure, timeout or protocol error breaks it
// for good: its state is unknown, so it is never used again.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <limitcounter/error.hpp>
#include <limitcounter/redis.hpp>
#include <limitcounter/reply.hpp>

#include "redis/resp.hpp"
#include "redis/transport.hpp"

namespace limitcounter::detail {

/// A command's arguments, viewing strings owned by the caller.
using Argv = std::vector<std::string_view>;

/// Thrown (as an io_error, Outcome::not_sent) when a connection that had already served
/// requests could not take a new one and not one byte of it left this process: the server
/// closed the connection while it sat in the pool. Nothing ran, so the caller may send the
/// same request again on a fresh connection; the router does so once.
class StaleConnection : public Error {
public:
  using Error::Error;
};

class Connection {
public:
  /// Connects to `host:port` (or `options.unix_socket` when `host` is empty and a socket is
  /// set), over TLS when `options.tls.enabled` (with `tls`, or a context made from the options
  /// when it is null; see tls_transport.hpp), then AUTH and SELECT as the options say, then checks
  /// the server once (INFO server and memory in one round trip; see server_check.hpp): a Redis
  /// older than 7.0, or one that may evict keys (unless `options.allow_evicting_server`), is
  /// refused. Throws Error(connect_failed, not_sent), naming the server and what is wrong. A check
  /// answered with a reply that says "not now" (BUSY, LOADING, MASTERDOWN, ...) or NOAUTH does not
  /// throw: the connection is returned broken (never pooled) and answers every command with
  /// that reply, unsent, so that the caller handles it as it would from a checked connection.
  /// `check_server` false skips that check: for a Redis Sentinel, which is no data server.
  static std::unique_ptr<Connection> open(const RedisOptions& options, const std::string& host,
                                          int port, bool check_server = true,
                                          std::shared_ptr<const TlsContext> tls = nullptr);
  ~Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// Sends one command and reads its reply. An error reply is returned, not thrown. An error
  /// reply to a request that carries the password of the options (AUTH) keeps only its code
  /// (`ERR`, `WRONGPASS`, ...): the server's words may repeat the password.
  /// On a connection whose server check was answered BUSY, LOADING, ... or NOAUTH (see
  /// `open`), sends nothing and returns that reply: the command did not run.
  /// Failures break the connection and throw:
  /// - nothing of the request was sent: Error(io_error | timeout, Outcome::not_sent), or
  ///   StaleConnection when this connection had served requests before;
  /// - after sending: Error(timeout | io_error | protocol_error, Outcome::unknown).
  Reply run(const Argv& argv);

  /// `run` of `<command> <script> <keys.size()> <keys...> <args...>` (EVALSHA and a SHA1, or
  /// FCALL and a function's name), without building that argv.
  Reply run_script_call(std::string_view command, std::string_view script,
                        const std::vector<std::string>& keys, const std::vector<std::string>& args);

  /// Sends every command (one buffer, written at once), then reads every reply, in order.
  /// Fails as `run`; once a byte has left, a failure is Outcome::unknown for all of them.
  std::vector<Reply> run_pipeline(const std::vector<Argv>& commands);

  /// False once an I/O error happened, or if the server has closed the connection while
  /// it sat idle (checked without sending anything).
  bool usable();
  bool broken() const noexcept { return broken_; }
  /// Where this connection goes, for error messages: "host:port" or the socket path.
  const std::string& peer() const noexcept { return peer_; }

private:
  Connection(std::unique_ptr<Transport> transport, std::string peer, std::string_view secret);
  Reply exchange(); // sends request_, reads one reply
  void send_request();
  Reply read_reply();
  void withhold_echo(Reply& reply) const;
  [[noreturn]] void fail_send(const IoResult& result, bool nothing_sent);
  [[noreturn]] void fail_read(const IoResult& result);

  std::unique_ptr<Transport> transport_;
  RespReader reader_; // bytes in, replies out
  std::string peer_;
  bool broken_ = false;
  std::uint64_t served_ = 0; // requests answered since AUTH/SELECT: > 0 means it was pooled
  std::string request_;      // reused across commands: no allocation per call once grown
  std::optional<Reply> check_refusal_; // the server check's "not now" reply, if it got one
  // The password this connection sends (AUTH), as one RESP bulk argument: a request holding
  // it gets error replies without the server's words, which may repeat its arguments.
  std::string secret_;
  std::string secret_argument_;
  bool request_holds_secret_ = false;
};

} // namespace limitcounter::detail
