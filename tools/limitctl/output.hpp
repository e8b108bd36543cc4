#pragma once
// limitctl's output: every command builds one Json value and prints it either as JSON
// (--json, for scripts) or as text for people (objects as "key: value" lines, lists of
// objects as aligned tables, text of several lines as an indented block), so the two never
// disagree. Both escape what does not show as itself (see `shown`).

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace limitctl {

/// A JSON value: null, bool, integer, string, array or object (keys in insertion order).
class Json {
public:
  enum class Type { null, boolean, integer, string, array, object };

  Json() = default; ///< null
  Json(std::nullptr_t) {}
  Json(bool value) : type_(Type::boolean), integer_(value ? 1 : 0) {}
  Json(int value) : type_(Type::integer), integer_(value) {}
  Json(std::int64_t value) : type_(Type::integer), integer_(value) {}
  Json(std::uint64_t value) : type_(Type::integer), integer_(static_cast<std::int64_t>(value)) {}
  Json(std::string value) : type_(Type::string), text_(std::move(value)) {}
  Json(const char* value) : type_(Type::string), text_(value) {}

  static Json array() { return Json(Type::array); }
  static Json object() { return Json(Type::object); }

  /// Adds `key` to an object (in order) and returns the object.
  Json& set(std::string key, Json value);
  /// Appends to an array and returns the array.
  Json& push(Json value);

  Type type() const noexcept { return type_; }
  /// Compact JSON text.
  std::string dump() const;
  /// The text form (see the file comment).
  void print_text(std::ostream& out) const;

private:
  explicit Json(Type type) : type_(type) {}
  std::string scalar_text() const;
  bool is_scalar() const noexcept { return type_ != Type::array && type_ != Type::object; }
  void print_object(std::ostream& out, int indent) const;
  void print_array(std::ostream& out, int indent) const;

  Type type_ = Type::null;
  std::int64_t integer_ = 0;
  std::string text_;
  std::vector<Json> items_;
  std::vector<std::pair<std::string, Json>> members_;
};

/// `text` as limitctl shows it on a terminal: every control or non-printing character (C0,
/// DEL, C1, Unicode whitespace but the space, invisible characters) as \xNN or \uNNNN, every
/// byte that is not UTF-8 as \xNN; the rest as is. Every text limitctl prints goes through it
/// (JSON escapes the same characters, see `Json::dump`), so that a value stored in Redis by
/// other means cannot move the cursor, clear the screen or hide a character.
std::string shown(std::string_view text);

/// Prints `value` to standard output as JSON (`json`) or as text.
void print(const Json& value, bool json);

} // namespace limitctl
