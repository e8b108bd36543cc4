// The text rules of key_part.hpp against hostile strings: what an id refuses, what display
// text refuses, and how a refused value is named in the message.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <limitcounter/key_part.hpp>

using limitcounter::errc;
using limitcounter::Error;
using limitcounter::detail::Escape;
using limitcounter::detail::escape_text;
using limitcounter::detail::quote_for_message;

namespace {

// `code_point` as UTF-8.
std::string utf8(char32_t code_point) {
  std::string out;
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xc0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3f));
  } else if (code_point < 0x10000) {
    out += static_cast<char>(0xe0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (code_point & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (code_point >> 18));
    out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (code_point & 0x3f));
  }
  return out;
}

// The message `check` throws for `value`, or "" if it accepts it.
template <typename Check> std::string refusal(Check&& check, const std::string& value) {
  try {
    check(value);
    return "";
  } catch (const Error& error) {
    CHECK(error.code() == errc::invalid_argument);
    return error.what();
  }
}

std::string id_refusal(const std::string& value) {
  return refusal([](const std::string& v) { limitcounter::validate_key_part("user", v); }, value);
}

std::string display_refusal(const std::string& value) {
  return refusal([](const std::string& v) { limitcounter::validate_display_text("nickname", v); },
                 value);
}

struct Hostile {
  std::string text;
  const char* id;      ///< in the id's message; nullptr: accepted as an id
  const char* display; ///< in display text's message; nullptr: accepted as display text
};

std::vector<Hostile> hostile_strings() {
  constexpr const char* control = "contains a control character";
  constexpr const char* space = "contains whitespace";
  constexpr const char* invisible = "contains an invisible character";
  constexpr const char* invalid = "is not valid UTF-8";
  std::vector<Hostile> table;
  for (char32_t c1 = 0x80; c1 <= 0x9f; ++c1) { // U+0085 next line, U+009B CSI among them
    table.push_back({"a" + utf8(c1) + "b", control, control});
  }
  for (const char32_t c0 : {0x00, 0x09, 0x0a, 0x0d, 0x1b, 0x7f}) {
    table.push_back({"a" + utf8(c0) + "b", control, control});
  }
  // Unicode whitespace: look like a space (or nothing); fine in a nickname.
  for (const char32_t ws : {0x00a0, 0x1680, 0x2000, 0x2005, 0x200a, 0x202f, 0x205f, 0x3000}) {
    table.push_back({"alice" + utf8(ws), space, nullptr});
  }
  // Line and paragraph separators break a line in logs and editors: refused everywhere.
  constexpr const char* separator = "contains a line separator";
  table.push_back({"a" + utf8(0x2028) + "b", separator, separator});
  table.push_back({"a" + utf8(0x2029) + "b", separator, separator});
  // Invisible: "alice" and these look alike as ids; a nickname may hold them (a zero width
  // joiner builds an emoji, a mark orders a right-to-left name), limitctl shows them escaped.
  for (const char32_t none :
       {0x00ad, 0x200b, 0x200d, 0x200e, 0x202e, 0x2066, 0xfeff, 0x3164, 0xe0041}) {
    table.push_back({"alice" + utf8(none), invisible, nullptr});
  }
  const std::vector<std::string> not_utf8{
      "\x9b",             // a lone CSI byte (ISO 8859-1's C1, not UTF-8)
      "a\x9b[2Jb",        // ... opening a clear-screen sequence
      "\x80",             // a stray continuation byte
      "\xc0\xaf",         // overlong '/'
      "\xc1\x81",         // overlong 'A'
      "\xe0\x80\xaf",     // overlong '/' in three bytes
      "\xf0\x80\x80\xaf", // overlong '/' in four bytes
      "a\xc2",            // U+0080 cut after its first byte
      "\xe6\x8b",         // cut short
      "\xed\xa0\x80",     // a UTF-16 surrogate
      "\xf4\x90\x80\x80", // past U+10FFFF
      "\xfe\xff",         // never in UTF-8
  };
  for (const auto& bytes : not_utf8) {
    table.push_back({bytes, invalid, invalid});
  }
  // Accepted by both.
  for (const std::string fine :
       {"alice", "\xe5\xbc\xa0\xe4\xb8\x89" /* 张三 */, "caf\xc3\xa9",
        "\xf0\x9f\xa7\xa7" /* 🧧 */, "\xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d"}) {
    table.push_back({fine, nullptr, nullptr});
  }
  return table;
}

} // namespace

TEST_CASE("hostile strings against the id rule and the display text rule", "[keys][text]") {
  for (const auto& hostile : hostile_strings()) {
    INFO("value " << quote_for_message(hostile.text));
    const std::string as_id = id_refusal(hostile.text);
    if (hostile.id == nullptr) {
      CHECK(as_id.empty());
    } else {
      CHECK_THAT(as_id, Catch::Contains(hostile.id) &&
                            Catch::Contains("ids and key parts are UTF-8 without whitespace"));
    }
    const std::string as_display = display_refusal(hostile.text);
    if (hostile.display == nullptr) {
      CHECK(as_display.empty());
    } else {
      CHECK_THAT(as_display, Catch::Contains(hostile.display) &&
                                 Catch::Contains("display text is UTF-8 without C0 or C1"));
    }
  }
}

TEST_CASE("a refused value is named escaped, with the character and the rule", "[keys][text]") {
  CHECK(id_refusal("alice\xc2\xa0") ==
        "user \"alice\\u00a0\" contains whitespace (U+00A0 at byte 5): ids and key parts are "
        "UTF-8 without whitespace, control or invisible characters");
  CHECK(display_refusal("x\xc2\x9b[2J") ==
        "nickname \"x\\u009b[2J\" contains a control character (U+009B at byte 1): display text "
        "is UTF-8 without C0 or C1 controls, U+2028 or U+2029");
  CHECK_THAT(display_refusal("ok \x9b"),
             Catch::Contains("\"ok \\x9b\" is not valid UTF-8 (byte 0x9b at byte 3)"));
  CHECK_THAT(id_refusal("a+b"), Catch::Contains("\"a+b\" contains a separator"));
  CHECK_THAT(id_refusal(""), Catch::Contains("\"\" is empty"));
}

TEST_CASE("escape_text escapes what does not show as itself and nothing else", "[keys][text]") {
  const std::string mixed = "a\"\\\t\n\x7f\xc2\x85\xc2\xa0\xe2\x80\xa8\xef\xbb\xbf \xe5\xbc\xa0"
                            "\xf3\xa0\x81\x81\x9b";
  CHECK(escape_text(mixed, Escape::plain) ==
        "a\"\\\\x09\\x0a\\x7f\\u0085\\u00a0\\u2028\\ufeff \xe5\xbc\xa0\\U000e0041\\x9b");
  CHECK(escape_text(mixed, Escape::quoted) ==
        "a\\\"\\\\\\x09\\x0a\\x7f\\u0085\\u00a0\\u2028\\ufeff \xe5\xbc\xa0\\U000e0041\\x9b");
  CHECK(escape_text(mixed, Escape::json) ==
        "a\\\"\\\\\\t\\n\\u007f\\u0085\\u00a0\\u2028\\ufeff \xe5\xbc\xa0\\udb40\\udc41\\ufffd");
}

TEST_CASE("quote_for_message cuts a long value on a character boundary", "[keys][text]") {
  const std::string long_value = std::string(79, 'x') + "\xe5\xbc\xa0" + std::string(100, 'y');
  const std::string quoted = quote_for_message(long_value);
  CHECK(quoted == "\"" + std::string(79, 'x') + "\xe5\xbc\xa0\"... (182 bytes)");
  CHECK(quote_for_message("short") == "\"short\"");
}
