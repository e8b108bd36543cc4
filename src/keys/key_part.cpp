#include <limitcounter/key_part.hpp>

#include <array>

namespace limitcounter::detail {
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

TextProblem key_part_problem(std::string_view value, std::string_view extra_allowed) noexcept {
  if (value.empty()) {
    return {"is empty"};
  }
  if (value.size() > max_key_part_bytes) {
    return {"is longer than 64 bytes"};
  }
  // Nearly every value is plain bytes only: one table look-up each. The rest is checked below
  // from the first other byte on.
  std::size_t plain = 0;
  while (plain < value.size() && plain_bytes[static_cast<unsigned char>(value[plain])]) {
    ++plain;
  }
  if (plain == value.size()) {
    return {};
  }
  for (std::size_t i = plain; i < value.size(); ++i) {
    const char c = value[i];
    if ((c == '+' || c == ':' || c == '{' || c == '}') &&
        extra_allowed.find(c) == std::string_view::npos) {
      return {c == '{' || c == '}' ? "contains a hash-tag brace '{' or '}'"
                                   : "contains a separator ('+' or ':')",
              nullptr, i};
    }
  }
  TextProblem problem = id_text_problem(value.substr(plain));
  if (problem) {
    problem.at += plain;
  }
  return problem;
}

} // namespace limitcounter::detail
