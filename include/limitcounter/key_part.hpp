#pragma once
// Validation of every value that goes into a Redis key or hash field. Refusing
// separators, braces and control characters is what keeps two counters from
// colliding and a caller from moving a key to another cluster slot.

#include <cstddef>
#include <string>
#include <string_view>

#include <limitcounter/error.hpp>

namespace limitcounter {

/// Longest value accepted for one part of a key or field, in bytes.
inline constexpr std::size_t max_key_part_bytes = 64;

namespace detail {

/// Renders `value` for an error message: printable ASCII as is, any other byte as \xNN,
/// cut after 80 bytes so that a huge input does not make a huge message.
std::string quote_for_message(std::string_view value);

/// Length of the valid UTF-8 sequence starting at `text[index]`, or 0 if it is not valid.
std::size_t utf8_sequence_length(std::string_view text, std::size_t index) noexcept;

/// Why `value` is not acceptable as a key part, or nullptr if it is. `extra_allowed`
/// lists separator characters this kind of part may contain (e.g. '+' in a scope name).
const char* key_part_problem(std::string_view value, std::string_view extra_allowed) noexcept;

} // namespace detail

/// Throws `Error` (invalid_argument) unless `value` is a valid key part: 1 to 64 bytes of
/// valid UTF-8 without whitespace, control characters, `+`, `:`, `{` or `}` (characters in
/// `extra_allowed` are let through). The message names `what` and the value.
inline void validate_key_part(std::string_view what, std::string_view value,
                              std::string_view extra_allowed = {}) {
  if (const char* problem = detail::key_part_problem(value, extra_allowed)) {
    throw Error(errc::invalid_argument,
                std::string(what) + " " + detail::quote_for_message(value) + " " + problem);
  }
}

} // namespace limitcounter
