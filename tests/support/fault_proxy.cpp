#include "support/fault_proxy.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string_view>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"

namespace limitcounter::testing {
namespace {

using Clock = std::chrono::steady_clock;
using Argv = std::vector<std::string>;

constexpr std::size_t fault_kinds = static_cast<std::size_t>(Fault::delay_forward) + 1;

// ---- RESP framing -------------------------------------------------------------------------

constexpr std::size_t incomplete = std::string_view::npos;

struct BadResp : std::runtime_error {
  using std::runtime_error::runtime_error;
};

long long header_number(std::string_view text) {
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    throw BadResp("bad RESP length \"" + std::string(text) + "\"");
  }
  return value;
}

bool is_bulk_type(char type) { return type == '$' || type == '=' || type == '!'; }
bool is_aggregate_type(char type) {
  return type == '*' || type == '~' || type == '>' || type == '%' || type == '|';
}
// Maps and attributes hold key-value pairs: twice their header's count of values.
long long values_in(char type, long long count) {
  return type == '%' || type == '|' ? 2 * count : count;
}

// The end of the complete RESP value (RESP2 or RESP3) that starts at `pos`, or `incomplete`.
std::size_t skip_value(std::string_view data, std::size_t pos) {
  if (pos >= data.size()) {
    return incomplete;
  }
  const std::size_t eol = data.find("\r\n", pos);
  if (eol == std::string_view::npos) {
    return incomplete;
  }
  const char type = data[pos];
  const std::string_view header = data.substr(pos + 1, eol - pos - 1);
  std::size_t next = eol + 2;
  if (is_bulk_type(type)) {
    const long long length = header_number(header);
    if (length < 0) {
      return next; // null bulk string
    }
    const std::size_t end = next + static_cast<std::size_t>(length) + 2;
    return end <= data.size() ? end : incomplete;
  }
  if (is_aggregate_type(type)) {
    const long long count = values_in(type, header_number(header));
    for (long long i = 0; i < count && next != incomplete; ++i) {
      next = skip_value(data, next);
    }
    // An attribute comes before the value it describes: they arrive as one.
    return type == '|' && next != incomplete ? skip_value(data, next) : next;
  }
  if (std::string_view("+-:_,#(").find(type) == std::string_view::npos) {
    throw BadResp(std::string("unknown RESP type byte '") + type + "'");
  }
  return next;
}

// A parsed RESP2 value, to rewrite a reply (CLUSTER SLOTS) and read a request's argv.
struct Value {
  char type = '+';
  std::string text; // the line of a simple value, the bytes of a bulk string
  bool null = false;
  std::vector<Value> items;
};

Value parse_value(std::string_view data, std::size_t& pos) {
  const std::size_t eol = data.find("\r\n", pos);
  Value value;
  value.type = data[pos];
  const std::string_view header = data.substr(pos + 1, eol - pos - 1);
  pos = eol + 2;
  if (is_bulk_type(value.type)) {
    const long long length = header_number(header);
    value.null = length < 0;
    if (!value.null) {
      value.text = std::string(data.substr(pos, static_cast<std::size_t>(length)));
      pos += static_cast<std::size_t>(length) + 2;
    }
  } else if (is_aggregate_type(value.type) && value.type != '|') {
    const long long count = header_number(header);
    value.null = count < 0;
    for (long long i = 0; i < values_in(value.type, count); ++i) {
      value.items.push_back(parse_value(data, pos));
    }
  } else {
    value.text = std::string(header);
  }
  return value;
}

void encode_value(const Value& value, std::string& out) {
  out += value.type;
  if (value.null) {
    out += "-1\r\n";
  } else if (is_bulk_type(value.type)) {
    out += std::to_string(value.text.size()) + "\r\n" + value.text + "\r\n";
  } else if (is_aggregate_type(value.type)) {
    const std::size_t pairs = value.type == '%' ? 2 : 1;
    out += std::to_string(value.items.size() / pairs) + "\r\n";
    for (const Value& item : value.items) {
      encode_value(item, out);
    }
  } else {
    out += value.text + "\r\n";
  }
}

// The argv of one complete request: a RESP array of bulk strings, or an inline command
// ("PING\r\n", as telnet sends it).
Argv request_argv(std::string_view request) {
  Argv argv;
  if (request.front() != '*') {
    std::string line(request.substr(0, request.find_first_of("\r\n")));
    std::size_t start = line.find_first_not_of(' ');
    while (start != std::string::npos) {
      const std::size_t end = line.find(' ', start);
      argv.push_back(line.substr(start, end - start));
      start = line.find_first_not_of(' ', end);
    }
    return argv;
  }
  std::size_t pos = 0;
  Value array = parse_value(request, pos);
  for (Value& item : array.items) {
    if (item.type != '$' || item.null) {
      throw BadResp("a request holds a value that is not a bulk string");
    }
    argv.push_back(std::move(item.text));
  }
  return argv;
}

// The end of the complete request at `pos`, or `incomplete`.
std::size_t skip_request(std::string_view data, std::size_t pos) {
  if (data[pos] == '*') {
    return skip_value(data, pos);
  }
  const std::size_t eol = data.find('\n', pos);
  return eol == std::string_view::npos ? incomplete : eol + 1;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::toupper(static_cast<unsigned char>(x)) ==
                  std::toupper(static_cast<unsigned char>(y));
         });
}

// ---- sockets --------------------------------------------------------------------------------

void set_no_delay(int fd) {
  // Replies go out as soon as they are complete: Nagle's algorithm would hold the second
  // of two small writes for the client's delayed ACK.
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// A non-blocking listening socket on 127.0.0.1:`port` (0: any free port), or -1.
int open_listener(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return -1;
  }
  // Listening again on the same port after stop_listening must not wait out TIME_WAIT.
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(fd, 128) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int bound_port(int fd) {
  sockaddr_in address{};
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  return ntohs(address.sin_port);
}

// A blocking connect to the proxied server, then non-blocking; -1 if it cannot be reached.
int connect_to(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) {
    return -1;
  }
  int fd = -1;
  for (addrinfo* candidate = found; candidate != nullptr && fd < 0;
       candidate = candidate->ai_next) {
    fd =
        socket(candidate->ai_family, candidate->ai_socktype | SOCK_CLOEXEC, candidate->ai_protocol);
    if (fd >= 0 && connect(fd, candidate->ai_addr, candidate->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd >= 0) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    set_no_delay(fd);
  }
  return fd;
}

void wake(int event_fd) {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t written = write(event_fd, &one, sizeof(one));
}

void drain(int event_fd) {
  std::uint64_t count = 0;
  [[maybe_unused]] const ssize_t read_bytes = read(event_fd, &count, sizeof(count));
}

// Appends what can be read now to `buffer`; false on EOF or a broken connection.
bool read_into(int fd, std::string& buffer) {
  char chunk[65536];
  for (;;) {
    const ssize_t got = recv(fd, chunk, sizeof(chunk), 0);
    if (got > 0) {
      buffer.append(chunk, static_cast<std::size_t>(got));
      continue;
    }
    if (got < 0 && errno == EINTR) {
      continue;
    }
    return got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

// Sends what the socket takes now from the front of `buffer`; false on a broken connection.
bool write_from(int fd, std::string& buffer) {
  std::size_t sent = 0;
  while (sent < buffer.size()) {
    const ssize_t put = send(fd, buffer.data() + sent, buffer.size() - sent, MSG_NOSIGNAL);
    if (put > 0) {
      sent += static_cast<std::size_t>(put);
    } else if (put < 0 && errno == EINTR) {
      continue;
    } else if (put < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    } else {
      return false;
    }
  }
  buffer.erase(0, sent);
  return true;
}

} // namespace

const char* to_string(Fault fault) noexcept {
  switch (fault) {
  case Fault::forward: return "forward";
  case Fault::drop_reply: return "drop_reply";
  case Fault::delay_reply: return "delay_reply";
  case Fault::cut_mid_reply: return "cut_mid_reply";
  case Fault::close_before_forward: return "close_before_forward";
  case Fault::blackhole: return "blackhole";
  case Fault::error_reply: return "error_reply";
  case Fault::delay_forward: return "delay_forward";
  }
  return "unknown";
}

CommandMatcher any_command() {
  return [](const Argv&) { return true; };
}

CommandMatcher command_named(std::string name) {
  return [name = std::move(name)](const Argv& argv) {
    return !argv.empty() && iequals(argv[0], name);
  };
}

CommandMatcher script_call_with_key_prefix(std::string prefix) {
  // EVALSHA sha numkeys key... (FCALL function numkeys key...): the first key is argv[3] when
  // numkeys >= 1.
  return [prefix = std::move(prefix)](const Argv& argv) {
    return argv.size() >= 4 &&
           (iequals(argv[0], "EVALSHA") || iequals(argv[0], "EVAL") || iequals(argv[0], "FCALL")) &&
           argv[2] != "0" && argv[3].compare(0, prefix.size(), prefix) == 0;
  };
}

// ---- shared state ---------------------------------------------------------------------------

namespace {

// What one command gets.
struct Decision {
  Fault fault = Fault::forward;
  std::chrono::milliseconds delay{0};
  std::string error;
};

} // namespace

class FaultProxySession;

struct FaultProxy::State {
  RedisOptions target;
  int port = 0;
  int acceptor_wake = -1;

  std::mutex mutex; // everything below
  std::condition_variable changed;
  std::vector<FaultRule> rules;
  std::optional<std::pair<std::mt19937_64, FaultMix>> schedule;
  // delay_reply_chunks: its generator, probability and delay, and how many it delayed
  std::mt19937_64 chunk_generator;
  double chunk_probability = 0;
  std::chrono::milliseconds chunk_delay{0};
  std::size_t delayed_chunks = 0;
  ReplyRewriter rewriter;
  std::array<std::size_t, fault_kinds> injected{};
  std::size_t forwarded = 0;
  bool stopping = false;
  bool refuse = false;
  Refusal how = Refusal::stop_listening;
  std::uint64_t requested = 0; // listener changes asked for
  std::uint64_t applied = 0;   // ... and made by the acceptor
  std::string listen_error;
  std::list<std::shared_ptr<FaultProxySession>> sessions;

  std::thread acceptor;

  Decision decide(const Argv& argv);
  std::chrono::milliseconds decide_chunk();
  void accept_loop(int listener);
};

// One client connection and its own connection to the server, served by one thread.
class FaultProxySession {
public:
  FaultProxySession(FaultProxy::State& state, int client) : state_(state), client_(client) {
    wake_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  }
  ~FaultProxySession() {
    for (const int fd : {client_, server_, wake_}) {
      if (fd >= 0) {
        close(fd);
      }
    }
  }
  FaultProxySession(const FaultProxySession&) = delete;
  FaultProxySession& operator=(const FaultProxySession&) = delete;

  void start() {
    thread_ = std::thread([this] {
      serve();
      // Closed here, on the session's own thread, so that cut_all() returns with the
      // connection really gone.
      close(client_);
      client_ = -1;
      if (server_ >= 0) {
        close(server_);
        server_ = -1;
      }
      const std::lock_guard<std::mutex> lock(state_.mutex);
      done_ = true;
      state_.changed.notify_all();
    });
  }
  /// Asks the session to close both connections (it does so on its own thread).
  void cut() {
    cut_ = true;
    wake(wake_);
  }
  bool done() const { return done_; } // under state_.mutex
  void join() { thread_.join(); }

private:
  // A reply slot per command the client will get an answer to, in command order.
  struct Slot {
    Argv argv;
    Fault fault = Fault::forward;
    std::chrono::milliseconds delay{0};
    bool filled = false; // its reply is known (from the server or the proxy's own)
    std::string reply;
  };
  struct Outgoing {
    Clock::time_point at;
    std::string bytes;
    bool close_after = false; // cut_mid_reply: close both sockets once these bytes are out
  };

  void serve() {
    server_ = connect_to(state_.target.host, state_.target.port);
    if (server_ < 0) {
      return; // the server is down: the client sees its connection closed
    }
    set_no_delay(client_);
    try {
      loop();
    } catch (const BadResp&) {
      // not Redis talking: drop the connection
    }
  }

  void loop() {
    while (!cut_) {
      release_due();
      if (closing_ && outgoing_.empty() && to_client_.empty()) {
        return;
      }
      std::array<pollfd, 3> fds{{{wake_, POLLIN, 0},
                                 {client_, static_cast<short>(POLLIN), 0},
                                 {server_, static_cast<short>(POLLIN), 0}}};
      if (!to_client_.empty()) {
        fds[1].events |= POLLOUT;
      }
      if (!to_server_.empty()) {
        fds[2].events |= POLLOUT;
      }
      int timeout = -1;
      if (!outgoing_.empty()) {
        const auto wait =
            std::chrono::ceil<std::chrono::milliseconds>(outgoing_.front().at - Clock::now());
        timeout = static_cast<int>(std::max<std::int64_t>(0, wait.count()));
      }
      if (poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) {
        return;
      }
      if (fds[0].revents != 0) {
        drain(wake_);
      }
      if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        if (!read_into(client_, from_client_) || !take_requests()) {
          return;
        }
      }
      if ((fds[2].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        if (!read_into(server_, from_server_) || !take_replies()) {
          return;
        }
      }
      release_due();
      if (!write_from(server_, to_server_) || !write_from(client_, to_client_)) {
        return;
      }
    }
  }

  // Handles every complete request received; false when the connection must close now.
  bool take_requests() {
    std::size_t pos = 0;
    bool open = true;
    while (open && pos < from_client_.size()) {
      const std::size_t end = skip_request(from_client_, pos);
      if (end == incomplete) {
        break;
      }
      open = take_request(std::string_view(from_client_).substr(pos, end - pos));
      pos = end;
    }
    from_client_.erase(0, pos);
    return open;
  }

  bool take_request(std::string_view request) {
    if (swallowing_ || closing_) {
      return true; // a blackholed connection (or one being cut) takes everything, answers nothing
    }
    Argv argv = request_argv(request);
    // Once a reply was dropped the client hears nothing more: later commands are only sent.
    const Decision decision = silent_ ? Decision{} : state_.decide(argv);
    switch (decision.fault) {
    case Fault::close_before_forward: return false;
    case Fault::blackhole: swallowing_ = true; return true;
    case Fault::error_reply:
      slots_.push_back(
          {std::move(argv), Fault::error_reply, {}, true, "-" + decision.error + "\r\n"});
      release_filled();
      return true;
    case Fault::drop_reply: silent_ = true; break;
    case Fault::delay_forward: std::this_thread::sleep_for(decision.delay); break;
    default: break;
    }
    to_server_.append(request);
    {
      const std::lock_guard<std::mutex> lock(state_.mutex);
      ++state_.forwarded;
    }
    slots_.push_back({std::move(argv), decision.fault, decision.delay, false, {}});
    return true;
  }

  // Matches every complete reply received to its command; false if the server sent a reply
  // no command asked for.
  bool take_replies() {
    std::size_t pos = 0;
    std::size_t replies = 0;
    while (pos < from_server_.size()) {
      const std::size_t end = skip_value(from_server_, pos);
      if (end == incomplete) {
        break;
      }
      const auto slot =
          std::find_if(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.filled; });
      if (slot == slots_.end()) {
        return false;
      }
      slot->reply = rewrite(slot->argv, from_server_.substr(pos, end - pos));
      slot->filled = true;
      pos = end;
      ++replies;
    }
    from_server_.erase(0, pos);
    release_filled(replies > 0 ? state_.decide_chunk() : std::chrono::milliseconds{0});
    return true;
  }

  std::string rewrite(const Argv& argv, std::string reply) {
    FaultProxy::ReplyRewriter rewriter;
    {
      const std::lock_guard<std::mutex> lock(state_.mutex);
      rewriter = state_.rewriter;
    }
    return rewriter ? rewriter(argv, std::move(reply)) : reply;
  }

  // Moves the replies known, from the front, to the client's queue, applying their faults;
  // each is held `chunk_delay` more (the delay drawn for the chunk that completed them).
  void release_filled(std::chrono::milliseconds chunk_delay = std::chrono::milliseconds{0}) {
    const auto now = Clock::now() + chunk_delay;
    while (!slots_.empty() && slots_.front().filled) {
      Slot slot = std::move(slots_.front());
      slots_.pop_front();
      if (closing_ || dropped_) {
        continue; // after a cut or a dropped reply the client gets no byte more
      }
      switch (slot.fault) {
      case Fault::drop_reply: dropped_ = true; break;
      case Fault::delay_reply:
        outgoing_.push_back({now + slot.delay, std::move(slot.reply), false});
        break;
      case Fault::cut_mid_reply:
        slot.reply.resize(slot.reply.size() / 2);
        outgoing_.push_back({Clock::now(), std::move(slot.reply), true});
        closing_ = true;
        break;
      default: outgoing_.push_back({now, std::move(slot.reply), false}); break;
      }
    }
  }

  // Moves the queued replies whose time has come, in order, to the client's write buffer.
  void release_due() {
    const auto now = Clock::now();
    while (!outgoing_.empty() && outgoing_.front().at <= now) {
      Outgoing& next = outgoing_.front();
      to_client_ += next.bytes;
      const bool close_after = next.close_after;
      outgoing_.pop_front();
      if (close_after) {
        outgoing_.clear();
        break;
      }
    }
  }

  FaultProxy::State& state_;
  int client_ = -1;
  int server_ = -1;
  int wake_ = -1;
  std::atomic<bool> cut_{false};
  bool done_ = false;
  std::thread thread_;
  std::string from_client_, to_server_, from_server_, to_client_;
  std::deque<Slot> slots_;
  std::deque<Outgoing> outgoing_;
  bool silent_ = false;     // a drop_reply command was sent: decide nothing more
  bool dropped_ = false;    // its reply came: the client gets no byte more
  bool swallowing_ = false; // blackhole: nothing more is sent or answered
  bool closing_ = false;    // cut_mid_reply: close once the half reply is out
};

Decision FaultProxy::State::decide(const Argv& argv) {
  const std::lock_guard<std::mutex> lock(mutex);
  Decision decision;
  const auto rule = std::find_if(rules.begin(), rules.end(), [&](const FaultRule& r) {
    return r.times > 0 && (!r.matches || r.matches(argv));
  });
  if (rule != rules.end()) {
    --rule->times;
    decision = {rule->fault, rule->delay, rule->error};
  } else if (schedule && schedule->second.matches(argv)) {
    auto& [generator, mix] = *schedule;
    // One draw per matching command (and one more for an error's text), so the faults
    // depend only on the seed and the sequence of commands.
    const double draw = static_cast<double>(generator() >> 11) * 0x1.0p-53;
    double sum = 0;
    for (const auto& [fault, probability] : mix.probability) {
      sum += probability;
      if (draw < sum) {
        decision.fault = fault;
        break;
      }
    }
    decision.delay = mix.delay;
    if (decision.fault == Fault::error_reply) {
      decision.error =
          mix.errors.empty() ? loading_error : mix.errors[generator() % mix.errors.size()];
    }
  }
  if (decision.fault != Fault::forward) {
    ++injected[static_cast<std::size_t>(decision.fault)];
  }
  return decision;
}

std::chrono::milliseconds FaultProxy::State::decide_chunk() {
  const std::lock_guard<std::mutex> lock(mutex);
  if (chunk_probability <= 0) {
    return std::chrono::milliseconds{0};
  }
  const double draw = static_cast<double>(chunk_generator() >> 11) * 0x1.0p-53;
  if (draw >= chunk_probability) {
    return std::chrono::milliseconds{0};
  }
  ++delayed_chunks;
  return chunk_delay;
}

void FaultProxy::State::accept_loop(int listener) {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex);
      const bool listening = !stopping && !(refuse && how == Refusal::stop_listening);
      if (listening && listener < 0) {
        listener = open_listener(port);
        listen_error = listener < 0 ? "cannot listen on 127.0.0.1:" + std::to_string(port) : "";
      } else if (!listening && listener >= 0) {
        close(listener);
        listener = -1;
      }
      applied = requested;
      // Threads of closed connections are joined here (they hold the mutex no more).
      for (auto it = sessions.begin(); it != sessions.end();) {
        if ((*it)->done()) {
          (*it)->join();
          it = sessions.erase(it);
        } else {
          ++it;
        }
      }
      changed.notify_all();
      if (stopping) {
        break;
      }
    }
    std::array<pollfd, 2> fds{{{acceptor_wake, POLLIN, 0}, {listener, POLLIN, 0}}};
    poll(fds.data(), listener >= 0 ? 2 : 1, -1);
    if (fds[0].revents != 0) {
      drain(acceptor_wake);
    }
    if (listener >= 0 && (fds[1].revents & POLLIN) != 0) {
      const int client = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (client < 0) {
        continue;
      }
      const std::lock_guard<std::mutex> lock(mutex);
      if (refuse) {
        close(client);
        continue;
      }
      sessions.push_back(std::make_shared<FaultProxySession>(*this, client));
      sessions.back()->start();
    }
  }
  if (listener >= 0) {
    close(listener);
  }
  std::list<std::shared_ptr<FaultProxySession>> open;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    open.swap(sessions);
  }
  for (const auto& session : open) {
    session->cut();
  }
  for (const auto& session : open) {
    session->join();
  }
}

// ---- FaultProxy -------------------------------------------------------------------------------

FaultProxy::FaultProxy(RedisOptions target) : state_(std::make_unique<State>()) {
  state_->target = std::move(target);
  int listener = -1;
  for (int attempt = 0; attempt < 5 && listener < 0; ++attempt) {
    listener = open_listener(0);
    if (listener >= 0 && bound_port(listener) == 6379) {
      close(listener); // never the port of a real Redis, even by chance
      listener = -1;
    }
  }
  if (listener < 0) {
    throw std::runtime_error("the fault proxy cannot listen on a loopback port");
  }
  state_->port = bound_port(listener);
  state_->acceptor_wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  State& state = *state_;
  state_->acceptor = std::thread([&state, listener] { state.accept_loop(listener); });
}

FaultProxy::FaultProxy(const RedisServer& server) : FaultProxy(server.options()) {}

FaultProxy::~FaultProxy() {
  {
    const std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stopping = true;
  }
  wake(state_->acceptor_wake);
  state_->acceptor.join();
  close(state_->acceptor_wake);
}

int FaultProxy::port() const noexcept { return state_->port; }

RedisOptions FaultProxy::options() const {
  RedisOptions options = state_->target;
  options.host = "127.0.0.1";
  options.port = state_->port;
  options.unix_socket.clear();
  options.cluster_seeds.clear();
  return options;
}

void FaultProxy::add_rule(FaultRule rule) {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  state_->rules.push_back(std::move(rule));
}

void FaultProxy::schedule(std::uint64_t seed, FaultMix mix) {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  state_->schedule.emplace(std::mt19937_64(seed), std::move(mix));
}

void FaultProxy::delay_reply_chunks(std::uint64_t seed, double probability,
                                    std::chrono::milliseconds delay) {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  state_->chunk_generator.seed(seed);
  state_->chunk_probability = probability;
  state_->chunk_delay = delay;
}

std::size_t FaultProxy::delayed_chunks() const {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->delayed_chunks;
}

void FaultProxy::clear() {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  state_->rules.clear();
  state_->schedule.reset();
  state_->chunk_probability = 0;
}

void FaultProxy::refuse_connections(bool refuse, Refusal how) {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->refuse = refuse;
  state_->how = how;
  const std::uint64_t ticket = ++state_->requested;
  wake(state_->acceptor_wake);
  state_->changed.wait(lock, [&] { return state_->applied >= ticket; });
  if (!state_->listen_error.empty()) {
    throw std::runtime_error(state_->listen_error);
  }
}

void FaultProxy::cut_all() {
  std::unique_lock<std::mutex> lock(state_->mutex);
  const std::list<std::shared_ptr<FaultProxySession>> open = state_->sessions;
  for (const auto& session : open) {
    session->cut();
  }
  state_->changed.wait(lock, [&] {
    return std::all_of(open.begin(), open.end(), [](const auto& s) { return s->done(); });
  });
}

std::size_t FaultProxy::injected(Fault fault) const {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->injected[static_cast<std::size_t>(fault)];
}

std::size_t FaultProxy::forwarded() const {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->forwarded;
}

void FaultProxy::set_reply_rewriter(ReplyRewriter rewriter) {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  state_->rewriter = std::move(rewriter);
}

// ---- ClusterFaultProxy ------------------------------------------------------------------------

namespace {

// CLUSTER SLOTS: [[first, last, [ip, port, id...], [replica ip, port, id...]...]...]
std::string rewrite_cluster_slots(const std::string& reply, const std::map<int, int>& ports) {
  std::size_t pos = 0;
  Value slots = parse_value(reply, pos);
  for (Value& range : slots.items) {
    for (std::size_t i = 2; i < range.items.size(); ++i) {
      Value& node = range.items[i];
      if (node.items.size() >= 2 && node.items[1].type == ':') {
        const auto proxy = ports.find(static_cast<int>(header_number(node.items[1].text)));
        if (proxy != ports.end()) {
          node.items[1].text = std::to_string(proxy->second);
        }
      }
    }
  }
  std::string out;
  encode_value(slots, out);
  return out;
}

// -MOVED 3999 127.0.0.1:6381 and -ASK 3999 127.0.0.1:6381
std::string rewrite_redirect(const std::string& reply, const std::map<int, int>& ports) {
  const std::size_t end = reply.size() - 2; // before \r\n
  const std::size_t colon = reply.rfind(':', end);
  if (colon == std::string::npos) {
    return reply;
  }
  int port = 0;
  const auto [stop, error] = std::from_chars(reply.data() + colon + 1, reply.data() + end, port);
  const auto proxy = ports.find(port);
  if (error != std::errc() || stop != reply.data() + end || proxy == ports.end()) {
    return reply;
  }
  return reply.substr(0, colon + 1) + std::to_string(proxy->second) + "\r\n";
}

} // namespace

ClusterFaultProxy::ClusterFaultProxy(const RedisCluster& cluster) : options_(cluster.options()) {
  std::map<int, int> ports; // node port -> proxy port
  options_.cluster_seeds.clear();
  for (const RedisServer* node : cluster.nodes()) {
    auto proxy = std::make_unique<FaultProxy>(*node);
    ports[node->port()] = proxy->port();
    options_.cluster_seeds.push_back("127.0.0.1:" + std::to_string(proxy->port()));
    by_node_port_[node->port()] = std::move(proxy);
  }
  const auto rewriter = [ports](const Argv& argv, std::string reply) {
    if (reply.compare(0, 7, "-MOVED ") == 0 || reply.compare(0, 5, "-ASK ") == 0) {
      return rewrite_redirect(reply, ports);
    }
    if (argv.size() >= 2 && iequals(argv[0], "CLUSTER") && iequals(argv[1], "SLOTS") &&
        reply[0] == '*') {
      return rewrite_cluster_slots(reply, ports);
    }
    return reply;
  };
  for (auto& [port, proxy] : by_node_port_) {
    proxy->set_reply_rewriter(rewriter);
  }
}

RedisOptions ClusterFaultProxy::options() const { return options_; }

FaultProxy& ClusterFaultProxy::proxy_of(const RedisServer& node) {
  const auto found = by_node_port_.find(node.port());
  if (found == by_node_port_.end()) {
    throw std::runtime_error("no proxy in front of port " + std::to_string(node.port()));
  }
  return *found->second;
}

void ClusterFaultProxy::cut_all() {
  for (auto& [port, proxy] : by_node_port_) {
    proxy->cut_all();
  }
}

} // namespace limitcounter::testing
