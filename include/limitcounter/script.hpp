#pragma once
// Script: a Lua script of lua/*.lua as embedded at build time.

#include <string_view>

namespace limitcounter {

/// An embedded Lua script. `sha1` is the lowercase hex SHA1 of `source`, which
/// is what SCRIPT LOAD returns and EVALSHA takes.
///
/// A script may also come as a Redis Functions library (`library`, loaded with FUNCTION
/// LOAD): Redis then runs the library's chunk once, and each call (FCALL `function_name`) only
/// the function, instead of the whole chunk at every EVALSHA. `Redis` calls such a script by
/// FCALL and falls back to EVALSHA of `source` where the server refuses FCALL or FUNCTION LOAD.
///
/// A library registers a second function, `<function_name>_ro`, flagged `no-writes`: Redis runs
/// it also when its memory is full (`maxmemory`), where it refuses a function that may write.
/// `scripts::<name>_read_only` is the script called by it (the same source and library), for
/// the calls that write nothing.
struct Script {
  std::string_view name;   ///< file name without `.lua`, e.g. "counter_add"
  std::string_view source; ///< the file's text as EVALSHA runs it (shared sources included)
  std::string_view sha1;   ///< 40 lowercase hex digits
  /// The same script as a Functions library ("#!lua name=<function_name>" ...); empty when it
  /// has none. Its name carries the script's version, so hosts running two versions of the
  /// library against one server each load their own.
  std::string_view library = {};
  std::string_view function_name = {}; ///< the function FCALL calls; empty without a library
  /// The name of `library` (FUNCTION LOAD answers it); empty: `function_name`.
  std::string_view library_name = {};

  /// The name FUNCTION LOAD answers for `library` (and FUNCTION LIST shows): `library_name`,
  /// or `function_name` when that is empty.
  constexpr std::string_view loaded_name() const noexcept {
    return library_name.empty() ? function_name : library_name;
  }
};

} // namespace limitcounter
