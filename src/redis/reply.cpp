#include <limitcounter/reply.hpp>

#include <charconv>

#include <limitcounter/error.hpp>
#include <limitcounter/key_part.hpp>

namespace limitcounter {
namespace {

const char* type_name(Reply::Type type) {
  switch (type) {
  case Reply::Type::nil: return "nil";
  case Reply::Type::integer: return "integer";
  case Reply::Type::string: return "string";
  case Reply::Type::status: return "status";
  case Reply::Type::error: return "error";
  case Reply::Type::array: return "array";
  }
  return "unknown";
}

[[noreturn]] void wrong_type(const Reply& reply, const char* wanted) {
  throw Error(errc::protocol_error,
              std::string("expected a Redis ") + wanted + " reply, got " + reply.debug_string(),
              Outcome::unknown);
}

} // namespace

std::int64_t Reply::as_integer() const {
  if (type_ != Type::integer) {
    wrong_type(*this, "integer");
  }
  return integer_;
}

const std::string& Reply::as_string() const {
  if (type_ != Type::string && type_ != Type::status && type_ != Type::error) {
    wrong_type(*this, "string");
  }
  return text_;
}

std::int64_t Reply::to_int64() const {
  if (type_ == Type::integer) {
    return integer_;
  }
  if (type_ == Type::string) {
    std::int64_t value = 0;
    const char* end = text_.data() + text_.size();
    const auto result = std::from_chars(text_.data(), end, value);
    if (!text_.empty() && result.ec == std::errc{} && result.ptr == end) {
      return value;
    }
  }
  wrong_type(*this, "integer (or integer string)");
}

const std::vector<Reply>& Reply::as_array() const {
  if (type_ != Type::array) {
    wrong_type(*this, "array");
  }
  return elements_;
}

const Reply& Reply::at(std::size_t index) const {
  const auto& elements = as_array();
  if (index >= elements.size()) {
    throw Error(errc::protocol_error,
                "Redis reply has no element " + std::to_string(index) + ": " + debug_string(),
                Outcome::unknown);
  }
  return elements[index];
}

std::string Reply::debug_string() const {
  switch (type_) {
  case Type::nil: return "(nil)";
  case Type::integer: return "(integer) " + std::to_string(integer_);
  case Type::string: return detail::quote_for_message(text_);
  case Type::status: return "(status) " + detail::quote_for_message(text_);
  case Type::error: return "(error) " + detail::quote_for_message(text_);
  case Type::array: {
    std::string out = "[";
    for (std::size_t i = 0; i < elements_.size(); ++i) {
      if (i == 8) {
        out += ", ... (" + std::to_string(elements_.size()) + " elements)";
        break;
      }
      out += (i == 0 ? "" : ", ") + elements_[i].debug_string();
    }
    return out + "]";
  }
  }
  return type_name(type_);
}

} // namespace limitcounter
