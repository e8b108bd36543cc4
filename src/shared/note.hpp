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
/// `max_bytes` bytes of display text (`validate_display_text`: it shows as written).
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
  validate_display_text(what, text);
}

} // namespace limitcounter::detail
