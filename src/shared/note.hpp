#pragma once
// Checks on the free texts an operator gives (a freeze reason, an adjustment's author and
// reason): they go into hashes, journals and audit streams that logs and terminals show.

#include <cstddef>
#include <string>
#include <string_view>

#include <limitcounter/error.hpp>
#include <limitcounter/key_part.hpp>

namespace limitcounter::detail {

/// Throws `Error` (invalid_argument) `<what> "<text>" <problem>` unless `text` is 1 to
/// `max_bytes` bytes of valid UTF-8 without control characters (so that it shows as written).
inline void validate_note(std::string_view what, std::string_view text, std::size_t max_bytes) {
  const auto bad = [&](const std::string& problem) {
    throw Error(errc::invalid_argument,
                std::string(what) + " " + quote_for_message(text) + " " + problem);
  };
  if (text.empty()) {
    bad("is empty");
  }
  if (text.size() > max_bytes) {
    bad("has " + std::to_string(text.size()) + " bytes, more than " + std::to_string(max_bytes));
  }
  for (std::size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x20 || byte == 0x7f) {
      bad("has a control character");
    }
    const std::size_t length = byte < 0x80 ? 1 : utf8_sequence_length(text, i);
    if (length == 0) {
      bad("is not valid UTF-8");
    }
    i += length;
  }
}

} // namespace limitcounter::detail
