#pragma once
// Reply: a Redis reply as a plain value, independent of hiredis, so that the
// code that interprets script replies is unit-tested without a server.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace limitcounter {

/// One RESP2 reply. Arrays own their elements.
class Reply {
public:
  /// The RESP2 reply kinds (a status is a simple string such as "OK").
  enum class Type { nil, integer, string, status, error, array };

  Reply() = default; ///< nil
  /// An integer reply.
  static Reply integer(std::int64_t value) {
    Reply r(Type::integer);
    r.integer_ = value;
    return r;
  }
  /// A bulk string reply.
  static Reply string(std::string value) { return Reply(Type::string, std::move(value)); }
  /// A status (simple string) reply, e.g. "OK".
  static Reply status(std::string value) { return Reply(Type::status, std::move(value)); }
  /// An error reply; `value` is its text (e.g. "ERR ...").
  static Reply error(std::string value) { return Reply(Type::error, std::move(value)); }
  /// An array reply owning `elements`.
  static Reply array(std::vector<Reply> elements) {
    Reply r(Type::array);
    r.elements_ = std::move(elements);
    return r;
  }

  /// The kind of reply.
  Type type() const noexcept { return type_; }
  /// A nil reply (e.g. a missing key).
  bool is_nil() const noexcept { return type_ == Type::nil; }
  /// An error reply; `as_string()` gives its text.
  bool is_error() const noexcept { return type_ == Type::error; }

  /// The integer of an integer reply. Throws `Error` (protocol_error) for any other type.
  std::int64_t as_integer() const;
  /// The text of a string, status or error reply. Throws `Error` (protocol_error) otherwise.
  const std::string& as_string() const;
  /// An integer reply, or a string reply holding a base-10 int64. Throws `Error` (protocol_error)
  /// otherwise.
  std::int64_t to_int64() const;
  /// The elements of an array reply. Throws `Error` (protocol_error) for any other type.
  const std::vector<Reply>& as_array() const;
  /// Element `index` of an array reply; throws `Error` (protocol_error) if out of range or not an
  /// array.
  const Reply& at(std::size_t index) const;

  /// A short human-readable rendering, for error messages and tests.
  std::string debug_string() const;

private:
  explicit Reply(Type type) : type_(type) {}
  Reply(Type type, std::string text) : type_(type), text_(std::move(text)) {}

  Type type_ = Type::nil;
  std::int64_t integer_ = 0;
  std::string text_;
  std::vector<Reply> elements_;
};

} // namespace limitcounter
