#pragma once
// The byte stream under a Connection: a TCP or Unix socket, plain or TLS. The connection layer
// owns the socket (Debian's hiredis 0.14 has no TLS) and speaks RESP itself (resp.hpp).
// Every read and write blocks for at most the socket's timeout (SO_RCVTIMEO / SO_SNDTIMEO), and
// no write can raise SIGPIPE (send with MSG_NOSIGNAL, for TLS too).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <limitcounter/redis.hpp>

namespace limitcounter::detail {

class TlsContext;

/// The result of one read or write.
struct IoResult {
  std::size_t bytes = 0; ///< > 0: bytes moved; 0: a failure, or the end of the stream
  int error_number = 0;  ///< errno of a failure (EAGAIN: the socket's timeout); 0 at the end
  std::string reason;    ///< the failure in words when errno does not say it (TLS)
};

class Transport {
public:
  virtual ~Transport() = default;
  Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  /// Connects to `host:port` (or `options.unix_socket` when `host` is empty) within
  /// `options.connect_timeout`, then, with `tls`, does the TLS handshake within it as well.
  /// Reads and writes then wait at most `options.command_timeout`. Throws
  /// Error(connect_failed, not_sent) naming `peer` and the reason.
  static std::unique_ptr<Transport> open(const RedisOptions& options, const std::string& host,
                                         int port, const std::string& peer, const TlsContext* tls);

  /// Writes some of `data` (at least one byte on success).
  virtual IoResult write_some(const char* data, std::size_t size) = 0;
  /// Reads what is there, up to `size` bytes, waiting for at least one.
  virtual IoResult read_some(char* data, std::size_t size) = 0;
  /// Whether an idle connection is still open and holds no unread byte, found without
  /// sending or waiting: a server that closed it left an EOF; unread bytes would be a stray
  /// reply.
  virtual bool idle_and_open() = 0;

  /// Bytes that left this process / arrived from the server so far, TLS records included:
  /// whether a byte of a request left decides "not sent" against "may have run".
  std::uint64_t bytes_sent() const noexcept { return sent_; }
  std::uint64_t bytes_received() const noexcept { return received_; }

protected:
  std::uint64_t sent_ = 0;
  std::uint64_t received_ = 0;
};

/// A connected socket, closed with this object.
class Socket {
public:
  explicit Socket(int fd) noexcept : fd_(fd) {}
  ~Socket();
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const noexcept { return fd_; }

  /// One send (MSG_NOSIGNAL) or recv, EINTR retried; counts into `sent` / `received`.
  IoResult send(const char* data, std::size_t size, std::uint64_t& sent) const;
  IoResult receive(char* data, std::size_t size, std::uint64_t& received) const;
  /// Peeks without waiting: false once the peer closed or the socket failed, or when a byte
  /// waits unread.
  bool idle_and_open() const;
  /// Waits until the socket can be read (`events` POLLIN) or written (POLLOUT), or until
  /// `deadline`: 0 when ready, ETIMEDOUT at the deadline, else the errno of poll.
  int wait_until(short events, std::chrono::steady_clock::time_point deadline) const;
  /// Both SO_RCVTIMEO and SO_SNDTIMEO; throws Error(connect_failed) naming `peer`.
  void set_timeout(std::chrono::milliseconds timeout, const std::string& peer) const;

private:
  int fd_;
};

/// A TLS session over `socket` (tls_transport.cpp): the handshake, its certificate checks and
/// their errors. `host` is the name verified unless the options give `server_name`. The
/// handshake ends by `deadline`, the one of the whole connect: each of its waits gets only
/// the time left, so a server trickling bytes cannot stretch it.
std::unique_ptr<Transport> open_tls(const TlsContext& tls, std::unique_ptr<Socket> socket,
                                    const RedisOptions& options, const std::string& host,
                                    const std::string& peer,
                                    std::chrono::steady_clock::time_point deadline);

} // namespace limitcounter::detail
