#include "support/secret.hpp"

namespace limitcounter::testing {

bool shows_secret(std::string_view text) {
  constexpr std::size_t piece = 5;
  for (std::size_t i = 0; i + piece <= known_secret.size(); ++i) {
    if (text.find(known_secret.substr(i, piece)) != std::string_view::npos) {
      return true;
    }
  }
  return false;
}

std::vector<std::string> malformed_uris_with_secret() {
  const std::string s(known_secret);
  return {
      // redis:// and rediss://
      "redis://:" + s,     // no '@', no host
      "redis://user:" + s, // a forgotten '@': the password reads as a port
      "redis://user:" + s + "/0",
      "redis://:" + s + ":host:6379",
      "redis://user:" + s + "@host:port",
      "redis://user:" + s + "@host/db",
      "redis://user:" + s + "@",
      "redis://user:" + s + "%zz@host", // bad percent-encoding in the password
      "redis://user:" + s + "@[::1",
      "redis://user:" + s + "@h o:1",
      "redis://user:" + s + "@host?password=" + s, // a query on redis://
      "redis://host?password=" + s,
      "redis://host:" + s,
      "redis://host:6379/" + s,
      "rediss://user:" + s + "@host?ca_file=/ca.pem&password=" + s,
      "rediss://host?verify_peer=" + s,
      "rediss://host?" + s, // a secret pasted without its key
      "rediss://host?ca_file=/ca.pem&" + s,
      "rediss://user:" + s,
      // unix://
      "unix:///tmp/redis.sock?db=0&password=" + s, // the query repeated in the error before
      "unix:///tmp/redis.sock?db=" + s,
      "unix:///tmp/redis.sock?" + s,
      "unix://:" + s + "@relative.sock",
      "unix://user:" + s,
      "unix://:" + s + "/tmp/redis.sock", // a forgotten '@'
      "unix://user:" + s + "@/tmp/redis.sock?db=x",
      "unix://user:" + s + "%g@/tmp/redis.sock",
      // redis-sentinel://
      "redis-sentinel://:" + s + "@s1:26379/mymaster?db=0&password=" + s,
      "redis-sentinel://s1:26379/mymaster?password=" + s,
      "redis-sentinel://user:" + s,
      "redis-sentinel://user:" + s + "/mymaster",
      "redis-sentinel://:" + s + "@s1:1/mymaster/" + s,
      "redis-sentinel://:" + s + "@s1:1/mymaster?db=" + s,
      "redis-sentinel://:" + s + "@s1:port/mymaster",
      // redis-cluster:// and rediss-cluster://
      "redis-cluster://user:" + s,
      "redis-cluster://user:" + s + "/0",
      "redis-cluster://:" + s + "@h:1/" + s,
      "redis-cluster://h1:1,user:" + s,
      "rediss-cluster://h:1?password=" + s,
      // no or an unknown scheme
      "redis:/user:" + s + "@host",
      "user:" + s + "@host:6379",
      s + "://host",
  };
}

} // namespace limitcounter::testing
