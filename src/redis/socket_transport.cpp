// Connecting a TCP or Unix socket with a deadline, and the plain transport over it.
#include "redis/transport.hpp"

#include <cerrno>
#include <cstring>
#include <system_error>

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <limitcounter/error.hpp>

namespace limitcounter::detail {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void cannot_connect(const std::string& peer, const std::string& reason) {
  throw Error(errc::connect_failed, "cannot connect to Redis at " + peer + ": " + reason);
}

std::string errno_text(int error_number) { return std::system_category().message(error_number); }

// Connects `socket` (non-blocking) to `address` by `deadline`; returns 0 or the errno.
int connect_by(const Socket& socket, const sockaddr* address, socklen_t length,
               Clock::time_point deadline) {
  if (::connect(socket.fd(), address, length) == 0) {
    return 0;
  }
  if (errno != EINPROGRESS) {
    return errno;
  }
  if (const int waited = socket.wait_until(POLLOUT, deadline); waited != 0) {
    return waited;
  }
  int error_number = 0;
  socklen_t size = sizeof(error_number);
  if (getsockopt(socket.fd(), SOL_SOCKET, SO_ERROR, &error_number, &size) != 0) {
    return errno;
  }
  return error_number;
}

// A connected socket, back in blocking mode (the timeouts bound each wait), or the errno.
std::unique_ptr<Socket> connect_one(int family, const sockaddr* address, socklen_t length,
                                    Clock::time_point deadline, int& error_number) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    error_number = errno;
    return nullptr;
  }
  auto socket = std::make_unique<Socket>(fd);
  error_number = connect_by(*socket, address, length, deadline);
  if (error_number != 0) {
    return nullptr;
  }
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    error_number = errno;
    return nullptr;
  }
  if (family != AF_UNIX) {
    // Requests are written whole: Nagle would only delay the next pipeline.
    const int on = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
  }
  return socket;
}

std::unique_ptr<Socket> connect_socket(const RedisOptions& options, const std::string& host,
                                       int port, const std::string& peer,
                                       Clock::time_point deadline) {
  int error_number = 0;
  if (host.empty()) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (options.unix_socket.size() >= sizeof(address.sun_path)) {
      cannot_connect(peer, "the socket path is longer than " +
                               std::to_string(sizeof(address.sun_path) - 1) + " bytes");
    }
    std::memcpy(address.sun_path, options.unix_socket.data(), options.unix_socket.size());
    auto socket = connect_one(AF_UNIX, reinterpret_cast<const sockaddr*>(&address), sizeof(address),
                              deadline, error_number);
    if (!socket) {
      cannot_connect(peer, errno_text(error_number));
    }
    return socket;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int failure = getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
      failure != 0) {
    cannot_connect(peer, failure == EAI_SYSTEM ? errno_text(errno) : gai_strerror(failure));
  }
  const std::unique_ptr<addrinfo, void (*)(addrinfo*)> addresses(found, freeaddrinfo);
  // Each address in turn, as hiredis did, all within the one connect_timeout.
  for (const addrinfo* address = found; address != nullptr; address = address->ai_next) {
    auto socket = connect_one(address->ai_family, address->ai_addr, address->ai_addrlen, deadline,
                              error_number);
    if (socket) {
      return socket;
    }
  }
  cannot_connect(peer, error_number == ETIMEDOUT
                           ? "no connection within the connect timeout (" +
                                 std::to_string(options.connect_timeout.count()) + " ms)"
                           : errno_text(error_number));
}

class PlainTransport final : public Transport {
public:
  explicit PlainTransport(std::unique_ptr<Socket> socket) : socket_(std::move(socket)) {}
  IoResult write_some(const char* data, std::size_t size) override {
    return socket_->send(data, size, sent_);
  }
  IoResult read_some(char* data, std::size_t size) override {
    return socket_->receive(data, size, received_);
  }
  bool idle_and_open() override { return socket_->idle_and_open(); }

private:
  std::unique_ptr<Socket> socket_;
};

} // namespace

Socket::~Socket() { ::close(fd_); }

// send() with MSG_NOSIGNAL cannot raise SIGPIPE in the host process: a library must not make
// its host ignore SIGPIPE. (hiredis 0.14 writes with write().)
IoResult Socket::send(const char* data, std::size_t size, std::uint64_t& sent) const {
  for (;;) {
    const ssize_t written = ::send(fd_, data, size, MSG_NOSIGNAL);
    if (written < 0 && errno == EINTR) {
      continue;
    }
    if (written <= 0) {
      return {0, written < 0 ? errno : EPIPE, {}};
    }
    sent += static_cast<std::size_t>(written);
    return {static_cast<std::size_t>(written), 0, {}};
  }
}

IoResult Socket::receive(char* data, std::size_t size, std::uint64_t& received) const {
  for (;;) {
    const ssize_t read = ::recv(fd_, data, size, 0);
    if (read < 0 && errno == EINTR) {
      continue;
    }
    if (read < 0) {
      return {0, errno, {}};
    }
    received += static_cast<std::size_t>(read);
    return {static_cast<std::size_t>(read), 0, {}};
  }
}

bool Socket::idle_and_open() const {
  char byte = 0;
  const ssize_t peeked = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (peeked < 0) {
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  }
  return false; // 0: the server closed it; > 0: unread bytes on an idle connection
}

int Socket::wait_until(short events, std::chrono::steady_clock::time_point deadline) const {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      return ETIMEDOUT;
    }
    pollfd entry{fd_, events, 0};
    const int ready = ::poll(&entry, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) {
      continue;
    }
    if (ready < 0) {
      return errno;
    }
    return ready == 0 ? ETIMEDOUT : 0;
  }
}

void Socket::set_timeout(std::chrono::milliseconds timeout, const std::string& peer) const {
  timeval tv{};
  tv.tv_sec = static_cast<decltype(tv.tv_sec)>(timeout.count() / 1000);
  tv.tv_usec = static_cast<decltype(tv.tv_usec)>((timeout.count() % 1000) * 1000);
  if (setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
      setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    throw Error(errc::connect_failed,
                "cannot set the socket timeouts on " + peer + ": " + errno_text(errno));
  }
}

std::unique_ptr<Transport> Transport::open(const RedisOptions& options, const std::string& host,
                                           int port, const std::string& peer,
                                           const TlsContext* tls) {
  // One deadline for the TCP connect and the TLS handshake, as connect_timeout promises.
  const auto deadline = Clock::now() + options.connect_timeout;
  std::unique_ptr<Socket> socket = connect_socket(options, host, port, peer, deadline);
  if (tls != nullptr) {
    return open_tls(*tls, std::move(socket), options, host, peer, deadline);
  }
  socket->set_timeout(options.command_timeout, peer);
  return std::make_unique<PlainTransport>(std::move(socket));
}

} // namespace limitcounter::detail
