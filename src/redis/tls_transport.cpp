// TLS over the connection's own socket, with OpenSSL: the client context (CAs, client
// certificate), the handshake with its certificate checks, and reads and writes through a
// BIO of ours.
#include "redis/tls_transport.hpp"

#include <cerrno>
#include <cstdio>
#include <system_error>

#include <arpa/inet.h>
#include <poll.h>
#include <sys/stat.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <limitcounter/error.hpp>
#include <limitcounter/key_part.hpp>

#include "redis/transport.hpp"

namespace limitcounter::detail {
namespace {

// The reason of the first error in this thread's OpenSSL queue, which is emptied.
unsigned long take_error(std::string& text) {
  const unsigned long code = ERR_peek_error();
  const char* reason = ERR_reason_error_string(code);
  text = reason != nullptr ? reason : "OpenSSL error " + std::to_string(code);
  ERR_clear_error();
  return code;
}

[[noreturn]] void bad_option(const std::string& what, const std::string& problem) {
  throw Error(errc::invalid_argument, "Redis TLS option " + what + " " + problem);
}

void require_file(const char* what, const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr) {
    bad_option(what, quote_for_message(path) + " cannot be read (" +
                         std::system_category().message(errno) + ")");
  }
  std::fclose(file);
}

// A loader's failure (the file exists, its content is wrong), with OpenSSL's reason.
void check_loaded(int result, const char* what, const std::string& path, const char* expected) {
  if (result != 1) {
    std::string reason;
    take_error(reason);
    bad_option(what, quote_for_message(path) + " does not hold " + expected + " (" + reason + ")");
  }
}

// An encrypted key would make OpenSSL ask for its pass phrase on the terminal: a library
// must fail instead.
int no_pass_phrase(char*, int, int, void*) { return 0; }

bool is_ip_address(const std::string& name) {
  unsigned char address[sizeof(in6_addr)];
  return inet_pton(AF_INET, name.c_str(), address) == 1 ||
         inet_pton(AF_INET6, name.c_str(), address) == 1;
}

// Our BIO: the TLS records go through Socket::send (MSG_NOSIGNAL) and Socket::receive. The
// socket BIO of OpenSSL writes with write()/send() without MSG_NOSIGNAL, which raises SIGPIPE
// on a closed connection; blocking SIGPIPE around each SSL_write instead (pthread_sigmask,
// then consuming a pending one) costs two system calls per write and races with a SIGPIPE
// the host sends itself. Our BIO also counts the bytes that left (decides "not sent"), keeps
// the errno of the last failure, and the first byte the server sent (a plaintext server's
// answer is not a TLS record). During the handshake each read and write first waits only the
// time left before the connect's deadline: the socket's timeout bounds one wait, and a server
// sending a byte before each timeout would hold the handshake for ever.
struct BioState {
  const Socket* socket = nullptr;
  bool handshaking = false;
  std::chrono::steady_clock::time_point deadline{};
  std::uint64_t* sent = nullptr;
  std::uint64_t* received = nullptr;
  int last_error = 0;
  int first_byte = -1;
};

// False when the handshake's deadline passed first (a retry flag: SSL_ERROR_WANT_READ or
// WANT_WRITE, as the socket's timeout) or the wait failed.
bool ready_by_deadline(BIO* bio, BioState& state, short events) {
  if (!state.handshaking) {
    return true;
  }
  const int waited = state.socket->wait_until(events, state.deadline);
  if (waited == 0) {
    return true;
  }
  state.last_error = waited == ETIMEDOUT ? EAGAIN : waited;
  if (waited == ETIMEDOUT && events == POLLIN) {
    BIO_set_retry_read(bio);
  } else if (waited == ETIMEDOUT) {
    BIO_set_retry_write(bio);
  }
  return false;
}

int bio_write(BIO* bio, const char* data, int size) {
  auto* state = static_cast<BioState*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  if (!ready_by_deadline(bio, *state, POLLOUT)) {
    return -1;
  }
  const IoResult result = state->socket->send(data, static_cast<std::size_t>(size), *state->sent);
  state->last_error = result.error_number;
  if (result.bytes == 0) {
    if (result.error_number == EAGAIN || result.error_number == EWOULDBLOCK) {
      BIO_set_retry_write(bio); // the socket's timeout: SSL_ERROR_WANT_WRITE
    }
    return -1;
  }
  return static_cast<int>(result.bytes);
}

int bio_read(BIO* bio, char* data, int size) {
  auto* state = static_cast<BioState*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  if (!ready_by_deadline(bio, *state, POLLIN)) {
    return -1;
  }
  const IoResult result =
      state->socket->receive(data, static_cast<std::size_t>(size), *state->received);
  state->last_error = result.error_number;
  if (result.bytes == 0) {
    if (result.error_number == EAGAIN || result.error_number == EWOULDBLOCK) {
      BIO_set_retry_read(bio); // the socket's timeout: SSL_ERROR_WANT_READ
    }
    return result.error_number == 0 ? 0 : -1;
  }
  if (state->first_byte < 0) {
    state->first_byte = static_cast<unsigned char>(data[0]);
  }
  return static_cast<int>(result.bytes);
}

long bio_ctrl(BIO*, int command, long, void*) { return command == BIO_CTRL_FLUSH ? 1 : 0; }

const BIO_METHOD* bio_method() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* made =
        BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "limitcounter socket");
    if (made != nullptr) {
      BIO_meth_set_write(made, bio_write);
      BIO_meth_set_read(made, bio_read);
      BIO_meth_set_ctrl(made, bio_ctrl);
      BIO_meth_set_create(made, [](BIO* bio) {
        BIO_set_init(bio, 1);
        return 1;
      });
    }
    return made;
  }();
  return method;
}

// What a TLS error means for the person reading the message, then OpenSSL's words.
std::string explain(unsigned long code, const std::string& text) {
  switch (ERR_GET_REASON(code)) {
  case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
    return "the server requires a client certificate (tls.cert_file, tls.key_file): " + text;
  case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
  case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
  case SSL_R_TLSV1_ALERT_UNKNOWN_CA: return "the server refused the client certificate: " + text;
  default: return text;
  }
}

class TlsTransport final : public Transport {
public:
  TlsTransport(std::unique_ptr<Socket> socket, SSL* ssl) : socket_(std::move(socket)), ssl_(ssl) {
    state_.socket = socket_.get();
    state_.sent = &sent_;
    state_.received = &received_;
  }
  ~TlsTransport() override { SSL_free(ssl_); } // frees the BIO; the socket closes after

  // The BIO, or false when OpenSSL cannot make one.
  bool attach_bio() {
    BIO* bio = bio_method() != nullptr ? BIO_new(bio_method()) : nullptr;
    if (bio == nullptr) {
      return false;
    }
    BIO_set_data(bio, &state_);
    SSL_set_bio(ssl_, bio, bio);
    return true;
  }

  // The handshake, ended by `deadline`; throws Error(connect_failed) naming the reason.
  void handshake(const RedisOptions& options, const std::string& name, const std::string& peer,
                 std::chrono::steady_clock::time_point deadline) {
    ERR_clear_error();
    state_.handshaking = true;
    state_.deadline = deadline;
    const int result = SSL_connect(ssl_);
    state_.handshaking = false;
    if (result == 1) {
      return;
    }
    const int kind = SSL_get_error(ssl_, result);
    std::string text;
    const unsigned long code = take_error(text);
    const long verified = SSL_get_verify_result(ssl_);
    std::string reason;
    if (options.tls.verify_peer && verified != X509_V_OK) {
      reason = std::string("the server's certificate failed verification: ") +
               X509_verify_cert_error_string(verified);
      if (verified == X509_V_ERR_HOSTNAME_MISMATCH || verified == X509_V_ERR_IP_ADDRESS_MISMATCH) {
        reason +=
            " (the name checked is " + quote_for_message(name) + "; tls.server_name sets another)";
      }
    } else if (state_.first_byte >= 0 && state_.first_byte != 0x15 && state_.first_byte != 0x16) {
      // Neither a handshake (0x16) nor an alert (0x15) record: a plaintext Redis answered
      // the ClientHello as a command.
      reason = "the server did not answer TLS; is it a plaintext port?";
    } else if (kind == SSL_ERROR_WANT_READ || kind == SSL_ERROR_WANT_WRITE) {
      reason = "no TLS handshake within the connect timeout (" +
               std::to_string(options.connect_timeout.count()) + " ms)" +
               (received_ == 0 ? "; is it a plaintext port?" : "");
    } else if (kind == SSL_ERROR_SSL) {
      reason = "the TLS handshake failed: " + explain(code, text);
    } else {
      reason =
          "the server closed the connection during the TLS handshake" +
          (state_.last_error != 0 ? " (" + std::system_category().message(state_.last_error) + ")"
                                  : std::string());
    }
    throw Error(errc::connect_failed,
                "cannot connect to Redis at " + peer + " over TLS: " + reason);
  }

  IoResult write_some(const char* data, std::size_t size) override {
    if (failed_) {
      return {0, EPIPE, {}}; // a failed session writes nothing more
    }
    ERR_clear_error();
    std::size_t written = 0;
    const int result = SSL_write_ex(ssl_, data, size, &written);
    if (result == 1) {
      return {written, 0, {}};
    }
    IoResult failed = failure(result);
    if ((failed.error_number == ECONNRESET || failed.error_number == EPIPE) &&
        failed.reason.empty()) {
      failed.reason = alert_before_close();
    }
    return failed;
  }

  IoResult read_some(char* data, std::size_t size) override {
    if (failed_) {
      return {0, EPIPE, {}};
    }
    ERR_clear_error();
    std::size_t read = 0;
    const int result = SSL_read_ex(ssl_, data, size, &read);
    return result == 1 ? IoResult{read, 0, {}} : failure(result);
  }

  // Bytes OpenSSL has decrypted but not handed out would be a stray reply too.
  bool idle_and_open() override {
    return !failed_ && SSL_pending(ssl_) == 0 && socket_->idle_and_open();
  }

private:
  // A server that refused the session sends an alert and closes: TLS 1.3 refuses a missing
  // client certificate only after the client's handshake is done, so our first write meets
  // the closed connection. The alert waits in the socket (a closed socket's read does not
  // wait): its reason says why, where the write's errno says only "reset".
  std::string alert_before_close() {
    ERR_clear_error();
    char byte = 0;
    std::size_t read = 0;
    const int result = SSL_read_ex(ssl_, &byte, 1, &read);
    if (result != 1 && SSL_get_error(ssl_, result) == SSL_ERROR_SSL) {
      std::string text;
      const unsigned long code = take_error(text);
      return "TLS: " + explain(code, text);
    }
    ERR_clear_error();
    return {};
  }

  // A failed read or write: the session is not used again (a connection breaks on any failure).
  IoResult failure(int result) {
    failed_ = true;
    const int kind = SSL_get_error(ssl_, result);
    std::string text;
    const unsigned long code = take_error(text);
    switch (kind) {
    case SSL_ERROR_ZERO_RETURN: return {}; // the server's close_notify: the end of the stream
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE: return {0, EAGAIN, {}}; // the socket's timeout
    case SSL_ERROR_SYSCALL: return {0, state_.last_error, {}};
    default:
      if (ERR_GET_REASON(code) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
        return {}; // closed without close_notify: as a plain connection closed
      }
      return {0, EPROTO, "TLS: " + explain(code, text)};
    }
  }

  std::unique_ptr<Socket> socket_;
  SSL* ssl_;
  BioState state_;
  bool failed_ = false;
};

} // namespace

TlsContext::TlsContext(const RedisOptions& options) : context_(nullptr) {
  // Freed if a check below throws; this object owns it once every check passed.
  std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)> owned(SSL_CTX_new(TLS_client_method()),
                                                     SSL_CTX_free);
  SSL_CTX* const context = owned.get();
  if (context == nullptr) {
    std::string reason;
    take_error(reason);
    throw Error(errc::invalid_argument, "cannot make an OpenSSL client context: " + reason);
  }
  if (options.cluster_seeds.empty() && !options.unix_socket.empty()) {
    bad_option("enabled", "is set with unix_socket: Redis serves TLS on a TCP port only");
  }
  const TlsOptions& tls = options.tls;
  SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION);
  SSL_CTX_set_default_passwd_cb(context, no_pass_phrase);
  if (!tls.ca_file.empty()) {
    require_file("ca_file", tls.ca_file);
    check_loaded(SSL_CTX_load_verify_locations(context, tls.ca_file.c_str(), nullptr), "ca_file",
                 tls.ca_file, "PEM CA certificates");
  }
  if (!tls.ca_dir.empty()) {
    struct stat info {};
    if (stat(tls.ca_dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
      bad_option("ca_dir", quote_for_message(tls.ca_dir) + " is not a directory");
    }
    check_loaded(SSL_CTX_load_verify_locations(context, nullptr, tls.ca_dir.c_str()), "ca_dir",
                 tls.ca_dir, "PEM CA certificates");
  }
  if (tls.ca_file.empty() && tls.ca_dir.empty()) {
    SSL_CTX_set_default_verify_paths(context); // the system's CA store
  }
  if (!tls.key_file.empty() && tls.cert_file.empty()) {
    bad_option("key_file", quote_for_message(tls.key_file) + " is set without a cert_file");
  }
  if (!tls.cert_file.empty()) {
    const std::string& key_file = tls.key_file.empty() ? tls.cert_file : tls.key_file;
    require_file("cert_file", tls.cert_file);
    require_file("key_file", key_file);
    check_loaded(SSL_CTX_use_certificate_chain_file(context, tls.cert_file.c_str()), "cert_file",
                 tls.cert_file, "a PEM certificate");
    check_loaded(SSL_CTX_use_PrivateKey_file(context, key_file.c_str(), SSL_FILETYPE_PEM),
                 "key_file", key_file, "an unencrypted PEM private key");
    if (SSL_CTX_check_private_key(context) != 1) {
      ERR_clear_error();
      bad_option("key_file", quote_for_message(key_file) + " is not the key of cert_file " +
                                 quote_for_message(tls.cert_file));
    }
  }
  // Verification is set per connection (the name differs per node); see open_tls.
  context_ = owned.release();
}

TlsContext::~TlsContext() { SSL_CTX_free(context_); }

std::shared_ptr<const TlsContext> make_tls_context(const RedisOptions& options) {
  const TlsOptions& tls = options.tls;
  if (!tls.enabled) {
    if (!tls.ca_file.empty() || !tls.ca_dir.empty() || !tls.cert_file.empty() ||
        !tls.key_file.empty() || !tls.server_name.empty()) {
      // A forgotten `enabled` must not send a payment system's traffic in plaintext.
      bad_option("enabled", "is false but other TLS options are set (use rediss:// or set "
                            "tls.enabled)");
    }
    return nullptr;
  }
  return std::make_shared<const TlsContext>(options);
}

std::unique_ptr<Transport> open_tls(const TlsContext& tls, std::unique_ptr<Socket> socket,
                                    const RedisOptions& options, const std::string& host,
                                    const std::string& peer,
                                    std::chrono::steady_clock::time_point deadline) {
  // The handshake's waits are part of connecting (each also waits at most the time left before
  // `deadline`); the session's reads and writes are commands.
  socket->set_timeout(options.connect_timeout, peer);
  Socket& raw = *socket;
  SSL* ssl = SSL_new(tls.native());
  if (ssl == nullptr) {
    std::string reason;
    take_error(reason);
    throw Error(errc::connect_failed, "cannot start TLS with Redis at " + peer + ": " + reason);
  }
  auto transport = std::make_unique<TlsTransport>(std::move(socket), ssl);
  if (!transport->attach_bio()) {
    throw Error(errc::connect_failed, "cannot start TLS with Redis at " + peer + ": no BIO");
  }
  const std::string& name = options.tls.server_name.empty() ? host : options.tls.server_name;
  const bool ip = is_ip_address(name);
  if (!ip) {
    // SNI names a host, never an address. (SSL_set_tlsext_host_name is this call, through a
    // macro with a C cast that our warnings refuse.)
    SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
             const_cast<char*>(name.c_str()));
  }
  if (options.tls.verify_peer) {
    SSL_set_verify(ssl, SSL_VERIFY_PEER, nullptr);
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (ip ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str()) != 1
           : SSL_set1_host(ssl, name.c_str()) != 1) {
      ERR_clear_error();
      throw Error(errc::connect_failed, "cannot verify Redis at " + peer + " as " +
                                            quote_for_message(name) + ": not a valid name");
    }
  } else {
    SSL_set_verify(ssl, SSL_VERIFY_NONE, nullptr);
  }
  transport->handshake(options, name, peer, deadline);
  raw.set_timeout(options.command_timeout, peer);
  return transport;
}

} // namespace limitcounter::detail
