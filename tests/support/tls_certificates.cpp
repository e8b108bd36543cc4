#include "support/tls_certificates.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace limitcounter::testing {
namespace {

void run(const std::string& command) {
  // EC keys: made in milliseconds, where RSA keys take a noticeable time on a loaded machine.
  if (std::system((command + " >/dev/null 2>&1").c_str()) != 0) {
    throw std::runtime_error("openssl failed (is it installed?): " + command);
  }
}

const char* const new_key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

void make_ca(const std::string& dir, const std::string& name, const std::string& subject) {
  run("openssl req -x509 " + std::string(new_key) + " -days 2 -subj '/CN=" + subject +
      "' -keyout '" + dir + "/" + name + ".key' -out '" + dir + "/" + name + ".crt'");
}

// A certificate named `name` signed by the CA "ca", with the extensions in `extensions`.
void make_signed(const std::string& dir, const std::string& name, const std::string& subject,
                 const std::string& extensions) {
  const std::string base = dir + "/" + name;
  run("openssl req " + std::string(new_key) + " -subj '/CN=" + subject + "' -keyout '" + base +
      ".key' -out '" + base + ".csr'");
  std::ofstream(base + ".ext") << extensions << "\n";
  run("openssl x509 -req -days 2 -in '" + base + ".csr' -CA '" + dir + "/ca.crt' -CAkey '" + dir +
      "/ca.key' -CAcreateserial -extfile '" + base + ".ext' -out '" + base + ".crt'");
}

} // namespace

TlsCertificates::TlsCertificates() {
  std::string pattern =
      (std::filesystem::temp_directory_path() / "limitcounter-tls-XXXXXX").string();
  std::vector<char> path(pattern.begin(), pattern.end());
  path.push_back('\0');
  if (mkdtemp(path.data()) == nullptr) {
    throw std::runtime_error("mkdtemp failed for " + pattern);
  }
  dir_ = path.data();
  try {
    make_ca(dir_, "ca", "limitcounter test CA");
    make_ca(dir_, "other_ca", "limitcounter unrelated CA");
    make_signed(dir_, "server", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1");
    make_signed(dir_, "client", "limitcounter test client", "extendedKeyUsage=clientAuth");
  } catch (...) {
    std::filesystem::remove_all(dir_);
    throw;
  }
}

TlsCertificates::~TlsCertificates() {
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

const TlsCertificates& tls_certificates() {
  static const TlsCertificates certificates;
  return certificates;
}

} // namespace limitcounter::testing
