#include "limit_counter/codec/common.hpp"

#include <algorithm>

namespace limitcounter::detail {

std::string quoted_id(std::string_view transaction_id) {
  return "transaction \"" + std::string(transaction_id) + "\"";
}

Error reused_id(std::string_view transaction_id) {
  return Error(errc::conflict,
               quoted_id(transaction_id) +
                   " was already used with another operation, amount or attributes",
               Outcome::failed);
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  parts.reserve(static_cast<std::size_t>(std::count(text.begin(), text.end(), separator)) + 1);
  while (!text.empty()) {
    const auto cut = text.find(separator);
    parts.push_back(text.substr(0, cut));
    text = cut == std::string_view::npos ? std::string_view{} : text.substr(cut + 1);
  }
  return parts;
}

} // namespace limitcounter::detail
