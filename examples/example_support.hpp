#pragma once
// What every example shares: where Redis is, and a check that reports what held.

#include <cstdlib>
#include <iostream>
#include <string>

namespace example {

/// The Redis URI: the first argument, else $LIMITCOUNTER_REDIS_URI, else the local default.
inline std::string redis_uri(int argc, char** argv) {
  if (argc > 1) {
    return argv[1];
  }
  if (const char* from_env = std::getenv("LIMITCOUNTER_REDIS_URI")) {
    return from_env;
  }
  return "redis://127.0.0.1:6379";
}

/// Prints whether `condition` held; the example's exit code counts the failures.
class Checks {
public:
  void expect(bool condition, const std::string& what) {
    std::cout << (condition ? "  [ok]   " : "  [FAIL] ") << what << '\n';
    failures_ += condition ? 0 : 1;
  }
  int exit_code() const { return failures_ == 0 ? EXIT_SUCCESS : EXIT_FAILURE; }

private:
  int failures_ = 0;
};

} // namespace example
