#pragma once
// Dimension: what a counter counts, e.g. channel + transType + dept.

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <limitcounter/key_part.hpp>

namespace limitcounter {

/// The ordered parts of a counter's hash field, joined with '+': {"Ali", "Deduct", "cmb"}
/// is the field `Ali+Deduct+cmb`. Every part is validated on construction (see
/// `validate_key_part`), so a Dimension that exists is always safe to put in Redis.
class Dimension {
public:
  /// Separator between parts in the hash field.
  static constexpr char separator = '+';

  /// Throws `Error` (invalid_argument) naming the first bad part, or if there are no parts.
  Dimension(std::initializer_list<std::string_view> parts) { assign(parts.begin(), parts.end()); }
  /// The same from a vector (e.g. parts read from a file); throws like the list form.
  explicit Dimension(const std::vector<std::string>& parts) { assign(parts.begin(), parts.end()); }

  /// The hash field: the parts joined with '+'.
  const std::string& field() const noexcept { return field_; }
  /// The parts, in order.
  std::vector<std::string> parts() const;

  /// Same parts in the same order (compares the fields).
  friend bool operator==(const Dimension& a, const Dimension& b) { return a.field_ == b.field_; }
  /// Not `==`.
  friend bool operator!=(const Dimension& a, const Dimension& b) { return !(a == b); }

private:
  template <typename It> void assign(It first, It last) {
    if (first == last) {
      throw Error(errc::invalid_argument, "a dimension needs at least one part");
    }
    for (It it = first; it != last; ++it) {
      validate_key_part("dimension part", *it);
      if (!field_.empty()) {
        field_ += separator;
      }
      field_ += *it;
    }
  }

  std::string field_;
};

inline std::vector<std::string> Dimension::parts() const {
  std::vector<std::string> parts;
  std::string_view rest = field_;
  for (auto cut = rest.find(separator); cut != std::string_view::npos; cut = rest.find(separator)) {
    parts.emplace_back(rest.substr(0, cut));
    rest.remove_prefix(cut + 1);
  }
  parts.emplace_back(rest);
  return parts;
}

} // namespace limitcounter
