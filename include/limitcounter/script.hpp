#pragma once
// Script: a Lua script of lua/*.lua as embedded at build time.

#include <string_view>

namespace limitcounter {

/// An embedded Lua script. `sha1` is the lowercase hex SHA1 of `source`, which
/// is what SCRIPT LOAD returns and EVALSHA takes.
struct Script {
  std::string_view name;   ///< file name without `.lua`, e.g. "counter_add"
  std::string_view source; ///< the file's text, byte for byte
  std::string_view sha1;   ///< 40 lowercase hex digits
};

} // namespace limitcounter
