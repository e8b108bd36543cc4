#include "redis/connection.hpp"

#include "redis/resp.hpp"

#include <cerrno>
#include <cstring>
#include <sys/socket.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include <limitcounter/error.hpp>

namespace limitcounter::detail {
namespace {

timeval to_timeval(std::chrono::milliseconds duration) {
  timeval tv{};
  tv.tv_sec = static_cast<decltype(tv.tv_sec)>(duration.count() / 1000);
  tv.tv_usec = static_cast<decltype(tv.tv_usec)>((duration.count() % 1000) * 1000);
  return tv;
}

Reply convert(const redisReply* reply) {
  switch (reply->type) {
  case REDIS_REPLY_INTEGER: return Reply::integer(reply->integer);
  case REDIS_REPLY_STRING: return Reply::string(std::string(reply->str, reply->len));
  case REDIS_REPLY_STATUS: return Reply::status(std::string(reply->str, reply->len));
  case REDIS_REPLY_ERROR: return Reply::error(std::string(reply->str, reply->len));
  case REDIS_REPLY_ARRAY: {
    std::vector<Reply> elements;
    elements.reserve(reply->elements);
    for (std::size_t i = 0; i < reply->elements; ++i) {
      elements.push_back(convert(reply->element[i]));
    }
    return Reply::array(std::move(elements));
  }
  default: return Reply();
  }
}

struct ReplyDeleter {
  void operator()(void* reply) const { freeReplyObject(reply); }
};

} // namespace

std::unique_ptr<Connection> Connection::open(const RedisOptions& options, const std::string& host,
                                             int port) {
  const bool over_socket = host.empty() && !options.unix_socket.empty();
  std::string peer = over_socket ? options.unix_socket : host + ":" + std::to_string(port);
  const timeval connect_timeout = to_timeval(options.connect_timeout);
  redisContext* context =
      over_socket ? redisConnectUnixWithTimeout(options.unix_socket.c_str(), connect_timeout)
                  : redisConnectWithTimeout(host.c_str(), port, connect_timeout);
  if (context == nullptr) {
    throw Error(errc::connect_failed, "cannot connect to Redis at " + peer + ": out of memory");
  }
  if (context->err != 0) {
    const std::string reason = context->errstr;
    redisFree(context);
    throw Error(errc::connect_failed, "cannot connect to Redis at " + peer + ": " + reason);
  }
  std::unique_ptr<Connection> connection(new Connection(context, std::move(peer)));
  if (redisSetTimeout(context, to_timeval(options.command_timeout)) != REDIS_OK) {
    throw Error(errc::connect_failed, "cannot set the command timeout on " + connection->peer_);
  }
  const auto setup = [&](const Argv& argv, const std::string& what) {
    try {
      const Reply reply = connection->run(argv);
      if (reply.is_error()) {
        // The server's text names the user at most, never the password we sent.
        throw Error(errc::connect_failed,
                    what + " failed on " + connection->peer_ + ": " + reply.as_string());
      }
    } catch (const Error& e) {
      if (e.code() == errc::connect_failed) {
        throw;
      }
      throw Error(errc::connect_failed, what + " on " + connection->peer_ + ": " + e.what());
    }
  };
  if (!options.password.empty()) {
    if (options.user.empty()) {
      setup({"AUTH", options.password}, "AUTH");
    } else {
      setup({"AUTH", options.user, options.password}, "AUTH as user " + options.user);
    }
  }
  if (options.db != 0 && options.cluster_seeds.empty()) {
    const std::string db = std::to_string(options.db);
    setup({"SELECT", db}, "SELECT");
  }
  return connection;
}

Connection::~Connection() { redisFree(context_); }

bool Connection::usable() {
  if (broken_) {
    return false;
  }
  // A server that closed this idle connection (restart, CLIENT KILL, idle timeout) left an
  // EOF in the socket: peek for it without blocking and without sending anything, so the
  // command can go to a fresh connection instead and is known not to have run.
  char byte = 0;
  const ssize_t peeked = recv(context_->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (peeked == 0 || (peeked < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
    broken_ = true;
  }
  // Unread bytes on an idle connection would be a stray reply: never trust it.
  if (peeked > 0) {
    broken_ = true;
  }
  return !broken_;
}

void Connection::append(const Argv& argv) {
  // Our own RESP encoding into a reused buffer: hiredis 0.14's redisAppendCommandArgv
  // formats through sdscatfmt, which costs more than the rest of a call on the client.
  request_.clear();
  append_resp_command(request_, argv);
  if (redisAppendFormattedCommand(context_, request_.data(), request_.size()) != REDIS_OK) {
    fail("preparing a command");
  }
}

Reply Connection::read_reply() {
  void* raw = nullptr;
  if (redisGetReply(context_, &raw) != REDIS_OK || raw == nullptr) {
    fail("waiting for a reply");
  }
  const std::unique_ptr<void, ReplyDeleter> reply(raw);
  return convert(static_cast<const redisReply*>(raw));
}

Reply Connection::run(const Argv& argv) {
  append(argv);
  return read_reply();
}

std::vector<Reply> Connection::run_pipeline(const std::vector<Argv>& commands) {
  for (const auto& argv : commands) {
    append(argv);
  }
  std::vector<Reply> replies;
  replies.reserve(commands.size());
  for (std::size_t i = 0; i < commands.size(); ++i) {
    replies.push_back(read_reply());
  }
  return replies;
}

void Connection::fail(const char* doing) {
  broken_ = true;
  const std::string reason = context_->errstr;
  // hiredis reports a socket timeout (SO_RCVTIMEO) as an I/O error with EAGAIN's text.
  const bool timed_out = context_->err == REDIS_ERR_IO &&
                         (reason.find("temporarily unavailable") != std::string::npos ||
                          reason.find("timed out") != std::string::npos);
  if (timed_out) {
    throw Error(errc::timeout,
                "Redis at " + peer_ + " did not answer in time while " + doing +
                    "; the command may have run",
                Outcome::unknown);
  }
  throw Error(context_->err == REDIS_ERR_PROTOCOL ? errc::protocol_error : errc::io_error,
              "Redis connection to " + peer_ + " failed while " + doing + ": " +
                  (reason.empty() ? "connection closed" : reason) + "; the command may have run",
              Outcome::unknown);
}

} // namespace limitcounter::detail
