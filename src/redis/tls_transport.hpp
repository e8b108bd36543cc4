#pragma once
// The OpenSSL client context of a node's connections: CA store, client certificate, protocol
// floor. Built once per connection pool, so the files are read once and not per connection.

#include <memory>

#include <limitcounter/redis.hpp>

struct ssl_ctx_st;

namespace limitcounter::detail {

class TlsContext {
public:
  /// Reads the files of `options.tls` (see TlsOptions). Throws Error(invalid_argument) naming a
  /// file that cannot be read, a key that does not match its certificate, or a TLS option that
  /// cannot apply (over a Unix socket).
  explicit TlsContext(const RedisOptions& options);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  ssl_ctx_st* native() const noexcept { return context_; }

private:
  ssl_ctx_st* context_;
};

/// The context `options` need: none when `options.tls.enabled` is false. Throws as
/// TlsContext, and Error(invalid_argument) when a TLS field is set but TLS is not enabled.
std::shared_ptr<const TlsContext> make_tls_context(const RedisOptions& options);

} // namespace limitcounter::detail
