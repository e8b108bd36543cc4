#include "redis/connection.hpp"

#include <algorithm>
#include <cerrno>
#include <string_view>
#include <system_error>

#include "redis/cluster_protocol.hpp"
#include "redis/resp.hpp"
#include "redis/retry_policy.hpp"
#include "redis/server_check.hpp"
#include "redis/tls_transport.hpp"

namespace limitcounter::detail {
namespace {

// A failed read or write in words: the transport's (TLS), else errno's.
std::string describe(const IoResult& result) {
  return !result.reason.empty()     ? result.reason
         : result.error_number != 0 ? std::system_category().message(result.error_number)
                                    : "connection closed";
}

bool is_timeout_errno(int error_number) {
  return error_number == EAGAIN || error_number == EWOULDBLOCK;
}

} // namespace

std::unique_ptr<Connection> Connection::open(const RedisOptions& options, const std::string& host,
                                             int port, bool check_server,
                                             std::shared_ptr<const TlsContext> tls) {
  const bool over_socket = host.empty() && !options.unix_socket.empty();
  std::string peer = over_socket ? options.unix_socket : host + ":" + std::to_string(port);
  if (!tls) {
    tls = make_tls_context(options);
  }
  // Reads and writes then give up after command_timeout (SO_RCVTIMEO, SO_SNDTIMEO) with EAGAIN.
  std::unique_ptr<Connection> connection(new Connection(
      Transport::open(options, over_socket ? std::string() : host, port, peer, tls.get()), peer,
      options.password));
  // Runs the commands in one round trip; an error reply or any failure is connect_failed:
  // whatever happened, the caller's own command was not sent yet. `did_not_run` says which
  // error replies are returned instead of thrown.
  const auto setup = [&](const std::vector<Argv>& commands, const std::string& what,
                         bool (*did_not_run)(const Reply&)) {
    try {
      std::vector<Reply> replies = connection->run_pipeline(commands);
      for (const Reply& reply : replies) {
        if (reply.is_error() && !did_not_run(reply)) {
          // The text of a reply to AUTH is its code only (see withhold_echo).
          throw Error(errc::connect_failed,
                      what + " failed on " + connection->peer_ + ": " + reply.as_string());
        }
      }
      return replies;
    } catch (const Error& e) {
      if (e.code() == errc::connect_failed) {
        throw;
      }
      // A TLS port drops a plaintext client's request at once, without a byte of answer.
      const bool maybe_tls_port =
          !tls && e.code() != errc::timeout && connection->transport_->bytes_received() == 0;
      // The failure's own words say the command may have run; the caller's was never sent.
      std::string cause = e.what();
      const std::string_view may_have_run = "; the command may have run";
      if (cause.size() >= may_have_run.size() &&
          cause.compare(cause.size() - may_have_run.size(), may_have_run.size(), may_have_run) ==
              0) {
        cause.resize(cause.size() - may_have_run.size());
      }
      throw Error(
          errc::connect_failed,
          what + " on " + connection->peer_ + ": " + cause + "; the caller's command was not sent" +
              (maybe_tls_port ? " (if it is a TLS port, use rediss:// or tls.enabled)" : ""));
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
  // (version, the commands every job needs, eviction)? Two INFO commands and COMMAND INFO in
  // one pipeline, as INFO with several sections needs Redis 7.0 and an older server must get
  // a clear refusal too.
  // A server that refuses INFO for a while (BUSY: a script runs past busy-reply-threshold) or
  // needs a password the options do not give (NOAUTH) has not run the caller's command either:
  // that reply is kept and becomes the reply of every command on this connection, which is
  // never sent (see run). The router then retries or reports it as for a pooled connection,
  // and discards this connection, unchecked.
  const auto refused_for_now = [](const Reply& reply) {
    const ReplyKind kind = classify(reply, false);
    return kind == ReplyKind::transient || kind == ReplyKind::noauth;
  };
  Argv command_info{"COMMAND", "INFO"};
  const auto& commands = checked_commands();
  command_info.insert(command_info.end(), commands.begin(), commands.end());
  std::vector<Reply> replies =
      setup({{"INFO", "server"}, {"INFO", "memory"}, std::move(command_info)},
            "the server check (INFO, COMMAND INFO)", refused_for_now);
  for (Reply& reply : replies) {
    if (reply.is_error()) {
      connection->check_refusal_ = std::move(reply);
      connection->broken_ = true;
      return connection;
    }
  }
  ServerInfo info = parse_server_info(replies[0].as_string() + replies[1].as_string());
  parse_command_info(replies[2], info);
  if (const auto refusal = server_refusal(info, options.allow_evicting_server)) {
    throw Error(errc::connect_failed, "cannot use Redis at " + connection->peer_ + ": " + *refusal);
  }
  connection->served_ = 0; // AUTH, SELECT and INFO do not make it a pooled connection
  return connection;
}

Connection::Connection(std::unique_ptr<Transport> transport, std::string peer,
                       std::string_view secret)
    : transport_(std::move(transport)), peer_(std::move(peer)), secret_(secret) {
  if (!secret.empty()) {
    append_resp_command(secret_argument_, {secret});
    // "*1\r\n$<n>\r\n<secret>\r\n" less "*1": the bulk as it follows any element's "\r\n".
    secret_argument_.erase(0, 2);
  }
}

bool Connection::usable() {
  if (broken_) {
    return false;
  }
  // A server that closed this idle connection (restart, CLIENT KILL, idle timeout) left an
  // EOF in the socket: peek for it without blocking and without sending anything, so the
  // command goes to a fresh connection instead and is known not to have run. Unread bytes on
  // an idle connection would be a stray reply: never trust it.
  if (!transport_->idle_and_open()) {
    broken_ = true;
  }
  return !broken_;
}

// We write the request ourselves, for two reasons: we know whether any byte left, which decides
// between "not sent" and "may have run" (bytes_sent counts TLS records too); and our own RESP
// encoding into a reused buffer costs a fraction of hiredis 0.14's sdscatfmt formatting (as our
// parser, which builds each Reply directly, costs a fraction of hiredis's reader followed by a
// conversion). The transport never raises SIGPIPE.
void Connection::send_request() {
  // Checked here, where every request passes: whichever command carries the password (AUTH,
  // HELLO ... AUTH), its replies are read without the server's words.
  request_holds_secret_ =
      !secret_argument_.empty() && request_.find(secret_argument_) != std::string::npos;
  const char* data = request_.data();
  std::size_t left = request_.size();
  const std::uint64_t sent_before = transport_->bytes_sent();
  while (left > 0) {
    const IoResult written = transport_->write_some(data, left);
    if (written.bytes == 0) {
      fail_send(written, transport_->bytes_sent() == sent_before);
    }
    data += written.bytes;
    left -= written.bytes;
  }
}

Reply Connection::read_reply() {
  Reply reply;
  for (;;) {
    const RespReader::Status status = reader_.next(reply);
    if (status == RespReader::Status::reply) {
      if (request_holds_secret_) {
        withhold_echo(reply);
      }
      return reply;
    }
    if (status == RespReader::Status::bad) {
      broken_ = true;
      throw Error(errc::protocol_error,
                  "Redis at " + peer_ + " sent a reply that is not RESP (" + reader_.problem() +
                      "); the command may have run",
                  Outcome::unknown);
    }
    char buffer[16 * 1024];
    const IoResult read = transport_->read_some(buffer, sizeof(buffer));
    if (read.bytes == 0) {
      fail_read(read);
    }
    reader_.feed(buffer, read.bytes);
  }
}

// An error reply to a request that carried the password keeps its code (ERR, WRONGPASS, ...)
// and loses the rest: "ERR unknown command 'AUTH', with args beginning with: 'user' 'S'" (a
// server where AUTH is renamed, a proxy) repeats the password, truncated or with its line
// breaks replaced, so no search for the password could find every copy. Done where server
// text enters the library, no error message or observer can show it. A redirect keeps its
// slot and address, which routing needs (a data argument may equal a short password).
void Connection::withhold_echo(Reply& reply) const {
  if (reply.type() == Reply::Type::array) {
    std::vector<Reply> elements = reply.as_array();
    for (Reply& element : elements) {
      withhold_echo(element);
    }
    reply = Reply::array(std::move(elements));
    return;
  }
  if (!reply.is_error()) {
    return;
  }
  const std::string& text = reply.as_string();
  if (parse_redirect(text) && text.find(secret_) == std::string::npos) {
    return;
  }
  const std::string code = text.substr(
      0, std::min<std::size_t>(text.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ"), 32));
  reply = Reply::error((code.empty() ? std::string("an error") : code) +
                       " (the rest of the server's reply is withheld: it may repeat the password)");
}

Reply Connection::run(const Argv& argv) {
  if (check_refusal_) {
    return *check_refusal_;
  }
  request_.clear();
  append_resp_command(request_, argv);
  return exchange();
}

Reply Connection::run_script_call(std::string_view command, std::string_view script,
                                  const std::vector<std::string>& keys,
                                  const std::vector<std::string>& args) {
  if (check_refusal_) {
    return *check_refusal_;
  }
  request_.clear();
  append_script_call(request_, command, script, keys, args);
  return exchange();
}

Reply Connection::exchange() {
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

void Connection::fail_send(const IoResult& result, bool nothing_sent) {
  broken_ = true;
  const bool timed_out = is_timeout_errno(result.error_number);
  const std::string reason = describe(result);
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

void Connection::fail_read(const IoResult& result) {
  broken_ = true;
  if (is_timeout_errno(result.error_number)) {
    throw Error(errc::timeout,
                "Redis at " + peer_ +
                    " did not answer within the command timeout; the command "
                    "may have run",
                Outcome::unknown);
  }
  // The request was sent: whether the server ran it before the connection broke is
  // unknown, even when the server closed the connection (it may have run the command and
  // been killed before answering). Never retried here.
  throw Error(errc::io_error,
              "Redis connection to " + peer_ + " failed while waiting for a reply: " +
                  describe(result) + "; the command may have run",
              Outcome::unknown);
}

} // namespace limitcounter::detail
