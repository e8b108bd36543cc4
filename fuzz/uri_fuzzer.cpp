// URI parsing: any text either parses or throws limitcounter::Error; a password in the
// text never appears in the error message.
#include <cstdlib>
#include <string>

#include <limitcounter/error.hpp>
#include <limitcounter/redis.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string uri(reinterpret_cast<const char*>(data), size);
  try {
    const auto options = limitcounter::RedisOptions::from_uri(uri);
    if (options.unix_socket.empty() && (options.port <= 0 || options.port > 65535)) {
      std::abort();
    }
  } catch (const limitcounter::Error& e) {
    const std::string secret = "s3cr3t-Pa55";
    if (uri.find(secret) != std::string::npos &&
        std::string(e.what()).find(secret) != std::string::npos) {
      std::abort();
    }
  }
  return 0;
}
