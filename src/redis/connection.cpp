#include "redis/connection.hpp"

#include <cerrno>
#include <system_error>

#include <sys/socket.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "redis/resp.hpp"
#include "redis/retry_policy.hpp"
#include "redis/server_check.hpp"

namespace limitcounter::detail {
namespace {

timeval to_timeval(std::chrono::milliseconds duration) {
  timeval tv{};
  tv.tv_sec = static_cast<decltype(tv.tv_sec)>(duration.count() / 1000);
  tv.tv_usec = static_cast<decltype(tv.tv_usec)>((duration.count() % 1000) * 1000);
  return tv;
}

// The one place where a hiredis reply becomes a Reply.
Reply convert(const redisReply* reply) {
  switch (reply->type) {
  case REDIS_REPLY_INTEGER: return Reply::integer(reply->integer);
  case REDIS_REPLY_STRING: return Reply::string(std::string(reply->str, reply->len));
  case REDIS_REPLY_STATUS: return Reply::status(std::string(reply->str, reply->len));
  case REDIS_REPLY_ERROR: return Reply::error(std::string(reply->str, reply->len));
  case REDIS_REPLY_NIL: return Reply();
  case REDIS_REPLY_ARRAY: {
    std::vector<Reply> elements;
    elements.reserve(reply->elements);
    for (std::size_t i = 0; i < reply->elements; ++i) {
      elements.push_back(convert(reply->element[i]));
    }
    return Reply::array(std::move(elements));
  }
  default:
    throw Error(errc::protocol_error,
                "hiredis returned a reply of unknown type " + std::to_string(reply->type),
                Outcome::unknown);
  }
}

struct ReplyDeleter {
  void operator()(void* reply) const { freeReplyObject(reply); }
};

bool is_timeout_errno(int error_number) {
  return error_number == EAGAIN || error_number == EWOULDBLOCK;
}

} // namespace

std::unique_ptr<Connection> Connection::open(const RedisOptions& options, const std::string& host,
                                             int port, bool check_server) {
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
  // Sets SO_RCVTIMEO and SO_SNDTIMEO: a blocking read or write gives up with EAGAIN.
  if (redisSetTimeout(context, to_timeval(options.command_timeout)) != REDIS_OK) {
    throw Error(errc::connect_failed, "cannot set the command timeout on " + connection->peer_);
  }
  // Runs the commands in one round trip; an error reply or any failure is connect_failed:
  // whatever happened, the caller's own command was not sent yet. `did_not_run` says which
  // error replies are returned instead of thrown.
  const auto setup = [&](const std::vector<Argv>& commands, const std::string& what,
                         bool (*did_not_run)(const Reply&)) {
    try {
      std::vector<Reply> replies = connection->run_pipeline(commands);
      for (const Reply& reply : replies) {
        if (reply.is_error() && !did_not_run(reply)) {
          // The server's text names the user at most, never the password we sent.
          throw Error(errc::connect_failed,
                      what + " failed on " + connection->peer_ + ": " + reply.as_string());
        }
      }
      return replies;
    } catch (const Error& e) {
      if (e.code() == errc::connect_failed) {
        throw;
      }
      throw Error(errc::connect_failed, what + " on " + connection->peer_ + ": " + e.what());
    }
  };
  const auto none = [](const Reply&) { return false; };
  if (!options.password.empty()) {
    if (options.user.empty()) {
      setup({{"AUTH", options.password}}, "AUTH", none);
    } else {
      setup({{"AUTH", options.user, options.password}}, "AUTH as user " + options.user, none);
    }
  }
  if (options.db != 0 && options.cluster_seeds.empty()) {
    const std::string db = std::to_string(options.db);
    setup({{"SELECT", db}}, "SELECT", none);
  }
  if (!check_server) {
    return connection;
  }
  // Once per connection, before it serves a caller: is this a server the library can run on
  // (version, eviction)? Two INFO commands in one pipeline, as INFO with several sections
  // needs Redis 7.0 and an older server must get a clear refusal too.
  // A server that refuses INFO for a while (BUSY: a script runs past busy-reply-threshold) or
  // needs a password the options do not give (NOAUTH) has not run the caller's command either:
  // that reply is kept and becomes the reply of every command on this connection, which is
  // never sent (see run). The router then retries or reports it as for a pooled connection,
  // and discards this connection, unchecked.
  const auto refused_for_now = [](const Reply& reply) {
    const ReplyKind kind = classify(reply, false);
    return kind == ReplyKind::transient || kind == ReplyKind::noauth;
  };
  std::string info;
  for (Reply& reply : setup({{"INFO", "server"}, {"INFO", "memory"}}, "the server check (INFO)",
                            refused_for_now)) {
    if (reply.is_error()) {
      connection->check_refusal_ = std::move(reply);
      connection->broken_ = true;
      return connection;
    }
    info += reply.as_string();
  }
  if (const auto refusal = server_refusal(parse_server_info(info), options.allow_evicting_server)) {
    throw Error(errc::connect_failed, "cannot use Redis at " + connection->peer_ + ": " + *refusal);
  }
  connection->served_ = 0; // AUTH, SELECT and INFO do not make it a pooled connection
  return connection;
}

Connection::~Connection() { redisFree(context_); }

bool Connection::usable() {
  if (broken_) {
    return false;
  }
  // A server that closed this idle connection (restart, CLIENT KILL, idle timeout) left an
  // EOF in the socket: peek for it without blocking and without sending anything, so the
  // command goes to a fresh connection instead and is known not to have run.
  char byte = 0;
  const ssize_t peeked = recv(context_->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (peeked == 0 || (peeked < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    broken_ = true;
  }
  // Unread bytes on an idle connection would be a stray reply: never trust it.
  if (peeked > 0) {
    broken_ = true;
  }
  return !broken_;
}

// We write the request ourselves rather than through hiredis's output buffer, for three
// reasons: send() with MSG_NOSIGNAL cannot raise SIGPIPE in the host process (hiredis
// 0.14 uses write(), and a library must not make its host ignore SIGPIPE); we know
// whether any byte left, which decides between "not sent" and "may have run"; and our own
// RESP encoding into a reused buffer costs less than hiredis 0.14's sdscatfmt formatting.
// hiredis's output buffer stays empty, so redisGetReply goes straight to reading.
void Connection::send_request() {
  const char* data = request_.data();
  std::size_t left = request_.size();
  bool sent_any = false;
  while (left > 0) {
    const ssize_t written = ::send(context_->fd, data, left, MSG_NOSIGNAL);
    if (written < 0 && errno == EINTR) {
      continue;
    }
    if (written <= 0) {
      fail_send(written < 0 ? errno : EPIPE, !sent_any);
    }
    sent_any = true;
    data += written;
    left -= static_cast<std::size_t>(written);
  }
}

Reply Connection::read_reply() {
  void* raw = nullptr;
  if (redisGetReply(context_, &raw) != REDIS_OK || raw == nullptr) {
    fail_read();
  }
  const std::unique_ptr<void, ReplyDeleter> reply(raw);
  return convert(static_cast<const redisReply*>(raw));
}

Reply Connection::run(const Argv& argv) {
  if (check_refusal_) {
    return *check_refusal_;
  }
  request_.clear();
  append_resp_command(request_, argv);
  send_request();
  Reply reply = read_reply();
  ++served_;
  return reply;
}

std::vector<Reply> Connection::run_pipeline(const std::vector<Argv>& commands) {
  if (check_refusal_) {
    return std::vector<Reply>(commands.size(), *check_refusal_);
  }
  request_.clear();
  for (const auto& argv : commands) {
    append_resp_command(request_, argv);
  }
  send_request();
  std::vector<Reply> replies;
  replies.reserve(commands.size());
  for (std::size_t i = 0; i < commands.size(); ++i) {
    replies.push_back(read_reply());
  }
  ++served_;
  return replies;
}

void Connection::fail_send(int error_number, bool nothing_sent) {
  broken_ = true;
  const bool timed_out = is_timeout_errno(error_number);
  const std::string reason = std::system_category().message(error_number);
  if (nothing_sent) {
    // send() failing before it took a byte means the server cannot have seen the request.
    const std::string message = "Redis connection to " + peer_ +
                                " failed before the request was sent (" + reason +
                                "); nothing was sent";
    if (served_ > 0 && !timed_out) {
      throw StaleConnection(errc::io_error, message, Outcome::not_sent);
    }
    throw Error(timed_out ? errc::timeout : errc::io_error, message, Outcome::not_sent);
  }
  throw Error(timed_out ? errc::timeout : errc::io_error,
              "Redis connection to " + peer_ + " failed while sending (" + reason +
                  "); the command may have run",
              Outcome::unknown);
}

void Connection::fail_read() {
  const int error_number = errno;
  broken_ = true;
  const std::string reason = context_->errstr;
  // hiredis reports a socket timeout (SO_RCVTIMEO) as an I/O error with EAGAIN's text.
  const bool timed_out = context_->err == REDIS_ERR_IO &&
                         (is_timeout_errno(error_number) ||
                          reason.find("temporarily unavailable") != std::string::npos ||
                          reason.find("timed out") != std::string::npos);
  if (timed_out) {
    throw Error(errc::timeout,
                "Redis at " + peer_ +
                    " did not answer within the command timeout; the command "
                    "may have run",
                Outcome::unknown);
  }
  // The request was sent: whether the server ran it before the connection broke is
  // unknown, even when the server closed the connection (it may have run the command and
  // been killed before answering). Never retried here.
  throw Error(context_->err == REDIS_ERR_PROTOCOL ? errc::protocol_error : errc::io_error,
              "Redis connection to " + peer_ + " failed while waiting for a reply: " +
                  (reason.empty() ? "connection closed" : reason) + "; the command may have run",
              Outcome::unknown);
}

} // namespace limitcounter::detail
