#include <limitcounter/key_part.hpp>

#include <array>

namespace limitcounter::detail {

std::string quote_for_message(std::string_view value) {
  constexpr std::size_t max_shown = 80;
  static constexpr char hex[] = "0123456789abcdef";
  std::string out = "\"";
  for (std::size_t i = 0; i < value.size() && i < max_shown; ++i) {
    const auto byte = static_cast<unsigned char>(value[i]);
    if (byte >= 0x20 && byte < 0x7f && byte != '"' && byte != '\\') {
      out += static_cast<char>(byte);
    } else {
      out += "\\x";
      out += hex[byte >> 4U];
      out += hex[byte & 0xfU];
    }
  }
  out += '"';
  if (value.size() > max_shown) {
    out += "... (" + std::to_string(value.size()) + " bytes)";
  }
  return out;
}

std::size_t utf8_sequence_length(std::string_view text, std::size_t index) noexcept {
  const auto lead = static_cast<unsigned char>(text[index]);
  std::size_t length = 0;
  unsigned min_code_point = 0;
  unsigned code_point = 0;
  if (lead < 0x80) {
    return 1;
  } else if ((lead & 0xe0U) == 0xc0) {
    length = 2, min_code_point = 0x80, code_point = lead & 0x1fU;
  } else if ((lead & 0xf0U) == 0xe0) {
    length = 3, min_code_point = 0x800, code_point = lead & 0x0fU;
  } else if ((lead & 0xf8U) == 0xf0) {
    length = 4, min_code_point = 0x10000, code_point = lead & 0x07U;
  } else {
    return 0;
  }
  if (index + length > text.size()) {
    return 0;
  }
  for (std::size_t i = 1; i < length; ++i) {
    const auto next = static_cast<unsigned char>(text[index + i]);
    if ((next & 0xc0U) != 0x80) {
      return 0;
    }
    code_point = (code_point << 6U) | (next & 0x3fU);
  }
  // Overlong forms, UTF-16 surrogates and values past U+10FFFF are not valid UTF-8.
  if (code_point < min_code_point || code_point > 0x10ffff ||
      (code_point >= 0xd800 && code_point <= 0xdfff)) {
    return 0;
  }
  return length;
}

namespace {

// Bytes every key part accepts: printable ASCII but space and the separators + : { }.
constexpr std::array<bool, 256> plain_bytes = [] {
  std::array<bool, 256> plain{};
  for (unsigned byte = 0x21; byte < 0x7f; ++byte) {
    plain[byte] = byte != '+' && byte != ':' && byte != '{' && byte != '}';
  }
  return plain;
}();

} // namespace

const char* key_part_problem(std::string_view value, std::string_view extra_allowed) noexcept {
  if (value.empty()) {
    return "is empty";
  }
  if (value.size() > max_key_part_bytes) {
    return "is longer than 64 bytes";
  }
  // Nearly every value is plain bytes only: one table look-up each. The rest is checked below
  // from the first other byte on.
  std::size_t plain = 0;
  while (plain < value.size() && plain_bytes[static_cast<unsigned char>(value[plain])]) {
    ++plain;
  }
  for (std::size_t i = plain; i < value.size();) {
    const char c = value[i];
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x80) {
      const std::size_t length = utf8_sequence_length(value, i);
      if (length == 0) {
        return "is not valid UTF-8";
      }
      i += length;
      continue;
    }
    if (byte < 0x20 || byte == 0x7f) {
      return "contains a control character";
    }
    if (c == ' ') {
      return "contains whitespace";
    }
    if ((c == '+' || c == ':' || c == '{' || c == '}') &&
        extra_allowed.find(c) == std::string_view::npos) {
      return c == '{' || c == '}' ? "contains a hash-tag brace '{' or '}'"
                                  : "contains a separator ('+' or ':')";
    }
    ++i;
  }
  return nullptr;
}

} // namespace limitcounter::detail
