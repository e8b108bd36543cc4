#include "support/redis_server.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/error.hpp>

namespace limitcounter::testing {
namespace {

// A port the kernel has just handed out on 127.0.0.1, so no other listener has it.
int free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    throw std::runtime_error("socket() failed");
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    close(fd);
    throw std::runtime_error("could not find a free loopback port");
  }
  const int port = ntohs(address.sin_port);
  close(fd);
  return port;
}

// Whether nothing listens on loopback `port` now.
bool loopback_port_is_free(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    return false;
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool free = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return free;
}

bool plain_server_answers_ping(int port) {
  timeval timeout{0, 200000};
  redisContext* context = redisConnectWithTimeout("127.0.0.1", port, timeout);
  if (context == nullptr) {
    return false;
  }
  bool ok = false;
  if (context->err == 0) {
    void* reply = redisCommand(context, "PING");
    // PONG, or NOAUTH from a server with requirepass: up. LOADING (a restart reading its
    // AOF) is not up yet.
    const auto* answer = static_cast<redisReply*>(reply);
    ok = answer != nullptr &&
         (answer->type == REDIS_REPLY_STATUS ||
          (answer->type == REDIS_REPLY_ERROR && std::strncmp(answer->str, "NOAUTH", 6) == 0));
    if (reply != nullptr) {
      freeReplyObject(reply);
    }
  }
  redisFree(context);
  return ok;
}

} // namespace

RedisServer::RedisServer(std::vector<std::string> extra_args)
    : RedisServer("redis-server", "", std::move(extra_args), std::nullopt) {}

RedisServer::RedisServer(std::vector<std::string> extra_args, TlsPort tls)
    : RedisServer("redis-server", "", std::move(extra_args), std::move(tls)) {}

RedisServer::RedisServer(std::string program, std::string config_file,
                         std::vector<std::string> extra_args)
    : RedisServer(std::move(program), std::move(config_file), std::move(extra_args), std::nullopt) {
}

RedisServer::RedisServer(std::string program, std::string config_file,
                         std::vector<std::string> extra_args, std::optional<TlsPort> tls)
    : program_(std::move(program)), config_file_(std::move(config_file)),
      extra_args_(std::move(extra_args)), tls_(std::move(tls)) {
  // A cluster node also listens on its bus port, port + 10000: it must exist and be free (the
  // kernel hands out ports up to 60999), else the node exits at start.
  const bool cluster_node =
      std::find(extra_args_.begin(), extra_args_.end(), "--cluster-enabled") != extra_args_.end();
  constexpr int bus_offset = 10000;
  for (int attempt = 0; attempt < 20; ++attempt) {
    port_ = free_loopback_port();
    if (port_ == 6379 || (cluster_node && (port_ + bus_offset > 65535 ||
                                           !loopback_port_is_free(port_ + bus_offset)))) {
      continue;
    }
    try {
      start();
      return;
    } catch (const std::runtime_error&) {
      kill(); // the port was taken between the probe and the start, or it hung: try another
    }
  }
  throw std::runtime_error("redis-server did not start on any free port");
}

bool RedisServer::answers_ping() const {
  if (!tls_) {
    return plain_server_answers_ping(port_);
  }
  // The library's own TLS connection (with its server check): up once it answers, NOAUTH
  // from a server with requirepass included, as above.
  RedisOptions probe = options();
  probe.connect_timeout = std::chrono::milliseconds(200);
  probe.command_timeout = std::chrono::milliseconds(200);
  probe.breaker_failures = 0;
  try {
    return !Redis(probe).command({"PING"}).is_error();
  } catch (const Error& e) {
    return std::strstr(e.what(), "NOAUTH") != nullptr;
  }
}

RedisServer::~RedisServer() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
}

void RedisServer::start() {
  std::vector<std::string> args{program_,
                                "--port",
                                tls_ ? "0" : std::to_string(port_),
                                "--bind",
                                "127.0.0.1",
                                "--save",
                                "",
                                "--appendonly",
                                "no",
                                "--daemonize",
                                "no",
                                "--protected-mode",
                                "no",
                                "--logfile",
                                ""};
  if (tls_) {
    args.insert(args.end(),
                {"--tls-port", std::to_string(port_), "--tls-cert-file", tls_->cert_file,
                 "--tls-key-file", tls_->key_file, "--tls-ca-cert-file", tls_->ca_file,
                 "--tls-auth-clients", tls_->auth_clients ? "yes" : "no"});
  }
  if (!config_file_.empty()) {
    args.insert(args.begin() + 1, config_file_);
  }
  args.insert(args.end(), extra_args_.begin(), extra_args_.end());
  // Everything the child needs is built before fork(): between fork and exec a child of a
  // multi-threaded process may only make async-signal-safe calls (no malloc).
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& arg : args) {
    argv.push_back(arg.data());
  }
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) {
    throw std::runtime_error("fork() failed");
  }
  if (child == 0) {
    // The server must not outlive a test binary that crashes. (The signal comes when the
    // thread that forked ends: servers are started from the test's main thread.)
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) {
      _exit(127); // the parent died before prctl took effect
    }
    // Keep the test output readable. dup2, not freopen: freopen would flush the parent's
    // unwritten stdout buffer a second time from this child.
    const int null_fd = open("/dev/null", O_WRONLY);
    if (null_fd >= 0) {
      dup2(null_fd, STDOUT_FILENO);
      close(null_fd);
    }
    execvp(argv[0], argv.data());
    _exit(127);
  }
  pid_ = child;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    if (answers_ping()) {
      return;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error(program_ + " exited at start (is it installed? port taken?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  throw std::runtime_error(program_ + " on port " + std::to_string(port_) + " did not answer");
}

void RedisServer::stop() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
}

void RedisServer::kill() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
}

void RedisServer::restart() {
  stop();
  start();
}

std::string RedisServer::uri() const { return "redis://127.0.0.1:" + std::to_string(port_); }

RedisOptions RedisServer::options() const {
  RedisOptions options;
  options.host = "127.0.0.1";
  options.port = port_;
  // A loaded 2-core CI machine running sanitizer builds: generous, so no test flakes on time.
  options.connect_timeout = std::chrono::milliseconds(2000);
  options.command_timeout = std::chrono::milliseconds(2000);
  options.pool_wait_timeout = std::chrono::milliseconds(5000);
  options.pool_size = 16;
  if (tls_) {
    options.tls.enabled = true;
    options.tls.ca_file = tls_->ca_file;
    if (tls_->auth_clients) {
      options.tls.cert_file = tls_->client_cert_file;
      options.tls.key_file = tls_->client_key_file;
    }
  }
  return options;
}

RedisServer& shared_server() {
  static RedisServer server;
  return server;
}

std::int64_t info_count(const RedisServer& node, const std::string& section,
                        const std::string& head) {
  RedisOptions options = node.options();
  options.pool_size = 1;
  const std::string info = Redis(options).command({"INFO", section}).as_string();
  const auto at = info.find(head);
  return at == std::string::npos ? 0 : std::stoll(info.substr(at + head.size()));
}

std::string unique_prefix() {
  static std::atomic<int> counter{0};
  return "t" + std::to_string(getpid()) + "-" + std::to_string(++counter) + ":";
}

void load_every_script(Redis& node) {
  for (const Script* script : scripts::all) {
    node.command({"SCRIPT", "LOAD", std::string(script->source)});
    if (!script->library.empty()) {
      node.command({"FUNCTION", "LOAD", "REPLACE", std::string(script->library)});
    }
  }
}

} // namespace limitcounter::testing
