#pragma once
// The MessagePack integers and arrays a script reads with Redis's cmsgpack.unpack: one argument
// that Lua decodes in C, where numbers sent one argument each, or as text to split, cost the
// script a string per number.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace limitcounter::detail {

/// Appends `value` in the shortest form: a positive or negative fixint, else an int64.
inline void append_msgpack_int(std::string& out, std::int64_t value) {
  if (value >= -32 && value <= 127) { // (a negative fixint is the value's own low byte)
    out.push_back(static_cast<char>(value));
    return;
  }
  out.push_back(static_cast<char>(0xd3));
  const auto bits = static_cast<std::uint64_t>(value);
  for (int shift = 56; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>((bits >> shift) & 0xff));
  }
}

/// Appends the head of an array of `size` elements (fixarray, array 16 or array 32).
inline void append_msgpack_array(std::string& out, std::size_t size) {
  if (size <= 15) {
    out.push_back(static_cast<char>(0x90 | size));
    return;
  }
  const bool small = size <= 0xffff;
  out.push_back(static_cast<char>(small ? 0xdc : 0xdd));
  for (int shift = small ? 8 : 24; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>((size >> shift) & 0xff));
  }
}

/// Appends `text` as a MessagePack string (fixstr, str 8, str 16 or str 32), which cmsgpack
/// decodes to a Lua string.
inline void append_msgpack_string(std::string& out, std::string_view text) {
  const std::size_t size = text.size();
  if (size <= 31) {
    out.push_back(static_cast<char>(0xa0 | size));
  } else {
    const int bytes = size <= 0xff ? 1 : size <= 0xffff ? 2 : 4;
    out.push_back(static_cast<char>(bytes == 1 ? 0xd9 : bytes == 2 ? 0xda : 0xdb));
    for (int shift = 8 * (bytes - 1); shift >= 0; shift -= 8) {
      out.push_back(static_cast<char>((size >> shift) & 0xff));
    }
  }
  out.append(text);
}

} // namespace limitcounter::detail
