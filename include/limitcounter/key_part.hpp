#pragma once
// The text rules, stated once (src/keys/text.cpp holds the tables):
//
// - An id or key part (user, order, transaction, packet, rule and dimension values, names)
//   is valid UTF-8 without Unicode whitespace, control or invisible characters, so that two
//   values that look alike are the same value, and without the separators `+`, `:` and the
//   hash-tag braces, so that two counters never collide and no caller moves a key to another
//   cluster slot.
// - Display text (a nickname, an avatar URL, a freeze or adjustment reason, a rule change's
//   author and reason) is valid UTF-8 without C0 or C1 controls (U+009B opens a terminal
//   control sequence, U+0085 breaks a line) or U+2028/U+2029, so that it shows as written in
//   logs and on terminals. It may hold spaces of any kind and invisible characters (a zero
//   width joiner builds emoji, a right-to-left mark orders a name); limitctl shows those
//   escaped.
// - A value named in an error message, or printed by limitctl, is escaped (`escape_text`).

#include <cstddef>
#include <string>
#include <string_view>

#include <limitcounter/error.hpp>

namespace limitcounter {

/// Longest value accepted for one part of a key or field, in bytes.
inline constexpr std::size_t max_key_part_bytes = 64;

namespace detail {

/// One code point decoded from UTF-8; `length` is 0 when the bytes at that offset are not
/// valid UTF-8 (a stray or missing continuation byte, an overlong form, a UTF-16 surrogate,
/// past U+10FFFF).
struct Utf8Step {
  char32_t code_point = 0;
  std::size_t length = 0;
};

/// The code point starting at `text[index]` (`index < text.size()`).
Utf8Step decode_utf8(std::string_view text, std::size_t index) noexcept;

/// Unicode whitespace and controls, every code point of Zs, Zl, Zp and Cc: C0 (U+0000 to
/// U+001F), U+0020, DEL and C1 (U+007F to U+009F), U+00A0, U+1680, U+2000 to U+200A,
/// U+2028, U+2029, U+202F, U+205F, U+3000.
bool is_space_or_control(char32_t code_point) noexcept;
/// Characters that show as nothing (the table in src/keys/text.cpp): the soft hyphen, zero
/// width spaces and joiners, bidi marks, embeddings, overrides and isolates, U+FEFF (the byte
/// order mark), invisible operators, variation selectors, the Hangul fillers, the tags.
bool is_invisible(char32_t code_point) noexcept;
/// The controls display text refuses: C0, DEL, C1, U+2028 and U+2029.
bool is_display_control(char32_t code_point) noexcept;

/// Why a text breaks a rule; `what` is nullptr when it breaks none.
struct TextProblem {
  const char* what = nullptr; ///< e.g. "contains whitespace"
  const char* rule = nullptr; ///< the rule broken, for the message (may be nullptr)
  /// Byte offset of the character (or byte, for invalid UTF-8) at fault; npos when the
  /// problem is about the whole value (empty, too long).
  std::size_t at = std::string_view::npos;
  explicit operator bool() const noexcept { return what != nullptr; }
};

/// The characters of an id (no length or separator check): valid UTF-8 without
/// `is_space_or_control` or `is_invisible` code points.
TextProblem id_text_problem(std::string_view value) noexcept;
/// `id_text_problem`, plus 1 to 64 bytes and none of `+ : { }` but those in `extra_allowed`
/// (e.g. ':' in an order id).
TextProblem key_part_problem(std::string_view value, std::string_view extra_allowed) noexcept;
/// The characters of display text (no length check): valid UTF-8 without
/// `is_display_control` code points.
TextProblem display_text_problem(std::string_view text) noexcept;

/// Throws `Error` (invalid_argument): `<what> "<value>" <problem> (U+XXXX at byte N): <rule>`.
[[noreturn]] void throw_text_problem(std::string_view what, std::string_view value,
                                     const TextProblem& problem);

/// How `escape_text` writes what does not show as itself: every byte that is not valid UTF-8,
/// and every code point that is `is_space_or_control` (but U+0020) or `is_invisible`.
enum class Escape {
  plain,  ///< \xNN for an ASCII control or a byte that is not UTF-8, else \uNNNN (\UNNNNNNNN)
  quoted, ///< as plain, and `"` as \" and `\` as \\ (a value inside quotes)
  json,   ///< a JSON string's content: \" \\ \n \t, \uNNNN (surrogate pairs), U+FFFD for a
          ///< byte that is not UTF-8 (JSON has no way to write it)
};

/// `text` with what does not show as itself escaped; other characters (CJK, emoji, accents)
/// as they are.
std::string escape_text(std::string_view text, Escape style);

/// `text` escaped (`Escape::quoted`) inside double quotes, cut after 80 bytes so that a huge
/// input does not make a huge message.
std::string quote_for_message(std::string_view value);

} // namespace detail

/// Throws `Error` (invalid_argument) unless `value` is a valid key part: 1 to 64 bytes of
/// valid UTF-8 without Unicode whitespace, control or invisible characters (see
/// `detail::is_space_or_control`, `detail::is_invisible`), `+`, `:`, `{` or `}` (characters
/// in `extra_allowed` are let through). The message names `what`, the value (escaped) and the
/// rule.
inline void validate_key_part(std::string_view what, std::string_view value,
                              std::string_view extra_allowed = {}) {
  if (const auto problem = detail::key_part_problem(value, extra_allowed)) {
    detail::throw_text_problem(what, value, problem);
  }
}

/// Throws `Error` (invalid_argument) unless `text` is valid display text: valid UTF-8
/// without C0 or C1 controls, U+2028 or U+2029 (lengths are the caller's rule). The message
/// names `what`, the text (escaped) and the rule.
inline void validate_display_text(std::string_view what, std::string_view text) {
  if (const auto problem = detail::display_text_problem(text)) {
    detail::throw_text_problem(what, text, problem);
  }
}

} // namespace limitcounter
