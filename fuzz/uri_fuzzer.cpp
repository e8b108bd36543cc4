// URI parsing: any text either parses or throws limitcounter::Error, and a password
// in the URI never appears in the error message, whatever follows it.
#include <cstdlib>
#include <string>

#include <limitcounter/error.hpp>
#include <limitcounter/redis.hpp>

namespace {

void parse(const std::string& uri, const std::string& secret) {
  try {
    const auto options = limitcounter::RedisOptions::from_uri(uri);
    if (options.unix_socket.empty() && options.cluster_seeds.empty() &&
        (options.port <= 0 || options.port > 65535)) {
      std::abort();
    }
  } catch (const limitcounter::Error& e) {
    if (!secret.empty() && std::string(e.what()).find(secret) != std::string::npos) {
      std::abort();
    }
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  parse(text, {});
  const std::string secret = "s3cr3t-Pa55";
  if (text.find(secret) != std::string::npos) {
    return 0; // the secret would be echoed as part of the host: not the property under test
  }
  for (const char* scheme :
       {"redis://", "rediss://", "unix://", "redis-cluster://", "redis-sentinel://"}) {
    parse(scheme + std::string("user:") + secret + "@" + text, secret);
    parse(scheme + std::string(":") + secret + "@" + text, secret);
    parse(scheme + std::string("user:") + secret + text, secret); // a forgotten '@'
    parse(scheme + text + "?db=0&password=" + secret, secret);    // a query value
  }
  return 0;
}
