#pragma once
// A tiny HTTP/1.0 server for `GET /metrics` (POSIX sockets, 127.0.0.1 only), used by
// examples/metrics_server.cpp and scraped by tests/redis/observer_test.cpp. It is example
// code, not part of the library: a production host serves render() from the HTTP server it
// already has.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <functional>
#include <string>
#include <system_error>
#include <thread>

namespace example {

/// Serves `render()` as `GET /metrics` on 127.0.0.1:`port` (0: a free port, see `port()`) from a
/// thread of its own, one request per connection, until destroyed. Anything else gets 404.
/// Throws std::system_error if the port cannot be bound.
class MetricsHttpServer {
public:
  MetricsHttpServer(std::function<std::string()> render, std::uint16_t port)
      : render_(std::move(render)), listener_(::socket(AF_INET, SOCK_STREAM, 0)) {
    if (listener_ < 0) {
      throw std::system_error(errno, std::generic_category(), "socket");
    }
    const int yes = 1;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    sockaddr_in address = loopback(port);
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(listener_, 16) != 0) {
      const int error = errno;
      ::close(listener_);
      throw std::system_error(error, std::generic_category(),
                              "bind 127.0.0.1:" + std::to_string(port));
    }
    socklen_t length = sizeof address;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }

  ~MetricsHttpServer() {
    stop_ = true;
    thread_.join();
    ::close(listener_);
  }

  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  std::uint16_t port() const { return port_; }

  static sockaddr_in loopback(std::uint16_t port) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return address;
  }

private:
  void serve() {
    while (!stop_) {
      // Wakes every 100 ms to see `stop_`, so the destructor never waits for a client.
      pollfd ready{listener_, POLLIN, 0};
      if (::poll(&ready, 1, 100) <= 0) {
        continue;
      }
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client >= 0) {
        answer(client);
        ::close(client);
      }
    }
  }

  void answer(int client) {
    // The request line is all we need: read until the end of the headers (or 8 KiB).
    std::string request;
    char buffer[1024];
    while (request.find("\r\n\r\n") == std::string::npos && request.size() < 8192) {
      pollfd ready{client, POLLIN, 0};
      if (::poll(&ready, 1, 1000) <= 0) {
        return; // a silent client is dropped, not waited for
      }
      const ssize_t n = ::recv(client, buffer, sizeof buffer, 0);
      if (n <= 0) {
        return;
      }
      request.append(buffer, static_cast<std::size_t>(n));
    }
    const bool metrics = request.rfind("GET /metrics ", 0) == 0;
    const std::string body = metrics ? render_() : "not found\n";
    const std::string response =
        std::string(metrics ? "HTTP/1.0 200 OK\r\n" : "HTTP/1.0 404 Not Found\r\n") +
        (metrics ? "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                 : "Content-Type: text/plain\r\n") +
        "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    for (std::size_t sent = 0; sent < response.size();) {
      const ssize_t n =
          ::send(client, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) {
        return;
      }
      sent += static_cast<std::size_t>(n);
    }
  }

  std::function<std::string()> render_;
  int listener_;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

/// The whole response (status line, headers, body) to `GET path` from 127.0.0.1:`port`.
/// Throws std::system_error if it cannot connect.
inline std::string http_get(std::uint16_t port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address = MetricsHttpServer::loopback(port);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    const int error = errno;
    if (fd >= 0) {
      ::close(fd);
    }
    throw std::system_error(error, std::generic_category(),
                            "connect 127.0.0.1:" + std::to_string(port));
  }
  const timeval limit{5, 0}; // a server that never answers fails the read, not the caller
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string response;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) {
    response.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return response;
}

} // namespace example
