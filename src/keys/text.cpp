// UTF-8 decoding, the character tables of the text rules (key_part.hpp) and the escaping of
// values in messages and on terminals.
#include <limitcounter/key_part.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iterator>

namespace limitcounter::detail {
namespace {

struct Range {
  char32_t first;
  char32_t last;
};

// Every code point of the Unicode categories Zs, Zl, Zp and Cc (Unicode 15; they have not
// changed since 6.3): what looks like nothing but space, or acts on the terminal.
constexpr Range space_and_control[] = {
    {0x0000, 0x0020}, // C0 controls, space
    {0x007f, 0x00a0}, // DEL, C1 controls (U+0085 next line, U+009B CSI), no-break space
    {0x1680, 0x1680}, // ogham space mark
    {0x2000, 0x200a}, // en quad ... hair space
    {0x2028, 0x2029}, // line separator, paragraph separator
    {0x202f, 0x202f}, // narrow no-break space
    {0x205f, 0x205f}, // medium mathematical space
    {0x3000, 0x3000}, // ideographic space
};

// Characters that render as nothing (default-ignorable format characters and the blank
// Hangul fillers): "alice" and "alice" + U+200B look the same.
constexpr Range invisible[] = {
    {0x00ad, 0x00ad},   // soft hyphen
    {0x034f, 0x034f},   // combining grapheme joiner
    {0x061c, 0x061c},   // Arabic letter mark
    {0x115f, 0x1160},   // Hangul choseong and jungseong fillers
    {0x17b4, 0x17b5},   // Khmer inherent vowels
    {0x180b, 0x180f},   // Mongolian variation selectors, vowel separator
    {0x200b, 0x200f},   // zero width space, non-joiner, joiner, left-to-right / right-to-left mark
    {0x202a, 0x202e},   // bidi embeddings and overrides
    {0x2060, 0x206f},   // word joiner, invisible operators, bidi isolates, deprecated formats
    {0x3164, 0x3164},   // Hangul filler
    {0xfe00, 0xfe0f},   // variation selectors
    {0xfeff, 0xfeff},   // zero width no-break space (byte order mark)
    {0xffa0, 0xffa0},   // halfwidth Hangul filler
    {0xfff0, 0xfffb},   // unassigned specials, interlinear annotation marks
    {0x1bca0, 0x1bca3}, // shorthand format controls
    {0x1d173, 0x1d17a}, // musical symbol format controls
    {0xe0000, 0xe0fff}, // tags, variation selectors supplement
};

template <std::size_t N> bool in(const Range (&table)[N], char32_t code_point) noexcept {
  return std::any_of(std::begin(table), std::end(table), [code_point](const Range& range) {
    return code_point >= range.first && code_point <= range.last;
  });
}

constexpr char hex_digits[] = "0123456789abcdef";

void append_hex(std::string& out, std::uint32_t value, int digits) {
  for (int shift = (digits - 1) * 4; shift >= 0; shift -= 4) {
    out += hex_digits[(value >> static_cast<unsigned>(shift)) & 0xfU];
  }
}

void append_code_point_escape(std::string& out, char32_t code_point, Escape style) {
  if (style == Escape::json && code_point > 0xffff) {
    const auto offset = static_cast<std::uint32_t>(code_point - 0x10000);
    out += "\\u";
    append_hex(out, 0xd800 + (offset >> 10U), 4);
    out += "\\u";
    append_hex(out, 0xdc00 + (offset & 0x3ffU), 4);
  } else if (style != Escape::json && code_point < 0x80) {
    out += "\\x";
    append_hex(out, code_point, 2);
  } else {
    out += code_point > 0xffff ? "\\U" : "\\u";
    append_hex(out, code_point, code_point > 0xffff ? 8 : 4);
  }
}

// The message's "(U+00A0 at byte 5)" for a character-level problem.
std::string where(std::string_view value, std::size_t at) {
  char text[64];
  const Utf8Step step = decode_utf8(value, at);
  if (step.length == 0) {
    std::snprintf(text, sizeof text, " (byte 0x%02x at byte %zu)",
                  static_cast<unsigned>(static_cast<unsigned char>(value[at])), at);
  } else {
    std::snprintf(text, sizeof text, " (U+%04X at byte %zu)",
                  static_cast<unsigned>(step.code_point), at);
  }
  return text;
}

// What `is_display_control(code_point)` breaks.
const char* control_problem(char32_t code_point) noexcept {
  return code_point == 0x2028 || code_point == 0x2029 ? "contains a line separator"
                                                      : "contains a control character";
}

// The first byte of `text` that is not UTF-8, or the first code point `problem_of` names.
template <typename ProblemOf>
TextProblem first_problem(std::string_view text, const char* rule, ProblemOf problem_of) noexcept {
  for (std::size_t i = 0; i < text.size();) {
    const Utf8Step step = decode_utf8(text, i);
    if (step.length == 0) {
      return {"is not valid UTF-8", rule, i};
    }
    if (const char* problem = problem_of(step.code_point)) {
      return {problem, rule, i};
    }
    i += step.length;
  }
  return {};
}

} // namespace

Utf8Step decode_utf8(std::string_view text, std::size_t index) noexcept {
  const auto lead = static_cast<unsigned char>(text[index]);
  std::size_t length = 0;
  char32_t min_code_point = 0;
  char32_t code_point = 0;
  if (lead < 0x80) {
    return {lead, 1};
  } else if ((lead & 0xe0U) == 0xc0) {
    length = 2, min_code_point = 0x80, code_point = lead & 0x1fU;
  } else if ((lead & 0xf0U) == 0xe0) {
    length = 3, min_code_point = 0x800, code_point = lead & 0x0fU;
  } else if ((lead & 0xf8U) == 0xf0) {
    length = 4, min_code_point = 0x10000, code_point = lead & 0x07U;
  } else {
    return {};
  }
  if (index + length > text.size()) {
    return {};
  }
  for (std::size_t i = 1; i < length; ++i) {
    const auto next = static_cast<unsigned char>(text[index + i]);
    if ((next & 0xc0U) != 0x80) {
      return {};
    }
    code_point = (code_point << 6U) | (next & 0x3fU);
  }
  // Overlong forms, UTF-16 surrogates and values past U+10FFFF are not valid UTF-8.
  if (code_point < min_code_point || code_point > 0x10ffff ||
      (code_point >= 0xd800 && code_point <= 0xdfff)) {
    return {};
  }
  return {code_point, length};
}

bool is_space_or_control(char32_t code_point) noexcept { return in(space_and_control, code_point); }

bool is_invisible(char32_t code_point) noexcept { return in(invisible, code_point); }

bool is_display_control(char32_t code_point) noexcept {
  return code_point < 0x20 || (code_point >= 0x7f && code_point <= 0x9f) || code_point == 0x2028 ||
         code_point == 0x2029;
}

TextProblem id_text_problem(std::string_view value) noexcept {
  constexpr const char* rule =
      "ids and key parts are UTF-8 without whitespace, control or invisible characters";
  return first_problem(value, rule, [](char32_t code_point) -> const char* {
    if (is_display_control(code_point)) {
      return control_problem(code_point);
    }
    if (is_space_or_control(code_point)) {
      return "contains whitespace";
    }
    return is_invisible(code_point) ? "contains an invisible character" : nullptr;
  });
}

TextProblem display_text_problem(std::string_view text) noexcept {
  constexpr const char* rule = "display text is UTF-8 without C0 or C1 controls, U+2028 or U+2029";
  return first_problem(text, rule, [](char32_t code_point) -> const char* {
    return is_display_control(code_point) ? control_problem(code_point) : nullptr;
  });
}

void throw_text_problem(std::string_view what, std::string_view value, const TextProblem& problem) {
  std::string message = std::string(what) + " " + quote_for_message(value) + " " + problem.what;
  if (problem.at != std::string_view::npos) {
    message += where(value, problem.at);
  }
  if (problem.rule != nullptr) {
    message += std::string(": ") + problem.rule;
  }
  throw Error(errc::invalid_argument, message);
}

std::string escape_text(std::string_view text, Escape style) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const Utf8Step step = decode_utf8(text, i);
    if (step.length == 0) {
      if (style == Escape::json) {
        out += "\\ufffd";
      } else {
        out += "\\x";
        append_hex(out, static_cast<unsigned char>(text[i]), 2);
      }
      ++i;
      continue;
    }
    const char32_t code_point = step.code_point;
    if (style != Escape::plain && (code_point == '"' || code_point == '\\')) {
      out += '\\';
      out += static_cast<char>(code_point);
    } else if (style == Escape::json && (code_point == '\n' || code_point == '\t')) {
      out += code_point == '\n' ? "\\n" : "\\t";
    } else if (code_point != ' ' && (is_space_or_control(code_point) || is_invisible(code_point))) {
      append_code_point_escape(out, code_point, style);
    } else {
      out.append(text.substr(i, step.length));
    }
    i += step.length;
  }
  return out;
}

std::string quote_for_message(std::string_view value) {
  constexpr std::size_t max_shown = 80;
  // Cut on a character boundary: a cut sequence would show as bytes that are not in the value.
  std::size_t shown = 0;
  while (shown < value.size() && shown < max_shown) {
    shown += std::max<std::size_t>(decode_utf8(value, shown).length, 1);
  }
  std::string out = "\"" + escape_text(value.substr(0, shown), Escape::quoted) + "\"";
  if (shown < value.size()) {
    out += "... (" + std::to_string(value.size()) + " bytes)";
  }
  return out;
}

} // namespace limitcounter::detail
