#pragma once
// One hiredis connection. Any I/O failure, timeout or protocol error breaks it for
// good: its state is unknown, so it is never used again.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <limitcounter/redis.hpp>
#include <limitcounter/reply.hpp>

struct redisContext;

namespace limitcounter::detail {

/// A command's arguments, viewing strings owned by the caller.
using Argv = std::vector<std::string_view>;

class Connection {
public:
  /// Connects to `host:port` (or `options.unix_socket` when `host` is empty and a socket is
  /// set), then AUTH and SELECT as the options say. Throws Error(connect_failed, not_sent).
  static std::unique_ptr<Connection> open(const RedisOptions& options, const std::string& host,
                                          int port);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// Sends one command and reads its reply. An error reply is returned, not thrown. Throws
  /// Error(timeout | io_error | protocol_error, Outcome::unknown) and breaks the connection.
  Reply run(const Argv& argv);

  /// Sends every command, then reads every reply, in order.
  std::vector<Reply> run_pipeline(const std::vector<Argv>& commands);

  /// False once an I/O error happened, or if the server has closed the connection while
  /// it sat idle (checked without sending anything).
  bool usable();
  bool broken() const noexcept { return broken_; }
  /// Where this connection goes, for error messages: "host:port" or the socket path.
  const std::string& peer() const noexcept { return peer_; }

private:
  Connection(redisContext* context, std::string peer) : context_(context), peer_(std::move(peer)) {}
  void append(const Argv& argv);
  Reply read_reply();
  [[noreturn]] void fail(const char* doing);

  redisContext* context_;
  std::string peer_;
  bool broken_ = false;
  std::string request_; // reused across commands: no allocation per call once grown
};

} // namespace limitcounter::detail
