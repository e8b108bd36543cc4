#pragma once
// Certificates for the TLS tests, made with the openssl CLI into a private temporary directory
// (removed with this object): a CA, a server certificate for "localhost" and 127.0.0.1 (subject
// alternative names) and a client certificate, both signed by that CA, and an unrelated CA.

#include <string>

namespace limitcounter::testing {

class TlsCertificates {
public:
  /// Runs openssl; throws std::runtime_error naming the command that failed.
  TlsCertificates();
  ~TlsCertificates();
  TlsCertificates(const TlsCertificates&) = delete;
  TlsCertificates& operator=(const TlsCertificates&) = delete;

  std::string ca_file() const { return dir_ + "/ca.crt"; }
  std::string server_cert_file() const { return dir_ + "/server.crt"; }
  std::string server_key_file() const { return dir_ + "/server.key"; }
  std::string client_cert_file() const { return dir_ + "/client.crt"; }
  std::string client_key_file() const { return dir_ + "/client.key"; }
  /// A CA that signed nothing here: trusting only it, no server certificate verifies.
  std::string other_ca_file() const { return dir_ + "/other_ca.crt"; }

private:
  std::string dir_;
};

/// The certificates shared by the tests of one binary, made on first use.
const TlsCertificates& tls_certificates();

} // namespace limitcounter::testing
