#include "limit_counter/counter_codec.hpp"

#include <charconv>
#include <string>

#include <limitcounter/error.hpp>
#include <limitcounter/key_part.hpp>

namespace limitcounter::detail {
namespace {

bool parse_int64(std::string_view text, std::int64_t& value) {
  const char* end = text.data() + text.size();
  const auto result = std::from_chars(text.data(), end, value);
  return !text.empty() && result.ec == std::errc{} && result.ptr == end;
}

} // namespace

Usage parse_counter_value(std::string_view text) {
  Usage usage;
  const auto cut = text.find(':');
  if (cut == std::string_view::npos || !parse_int64(text.substr(0, cut), usage.count) ||
      !parse_int64(text.substr(cut + 1), usage.amount)) {
    throw Error(errc::protocol_error,
                "counter value " + quote_for_message(text) + " is not <count>:<amount>",
                Outcome::failed);
  }
  return usage;
}

std::vector<Usage> decode_counter_add(const Reply& reply, std::size_t windows,
                                      std::string_view context) {
  const auto& items = reply.as_array();
  if (!items.empty() && items[0].type() == Reply::Type::string &&
      items[0].as_string() == "overflow") {
    throw Error(errc::precision_overflow,
                std::string(context) + ": window " + std::to_string(reply.at(1).to_int64()) +
                    " would reach count " + reply.at(2).as_string() + ", amount " +
                    reply.at(3).as_string() + ", past 2^53 - 1; nothing was written",
                Outcome::failed);
  }
  if (items.size() != 1 + 2 * windows || items[0].as_string() != "ok") {
    throw Error(errc::protocol_error,
                std::string(context) + ": unexpected counter_add reply " + reply.debug_string(),
                Outcome::unknown);
  }
  std::vector<Usage> totals(windows);
  for (std::size_t i = 0; i < windows; ++i) {
    totals[i] = {items[1 + 2 * i].as_integer(), items[2 + 2 * i].as_integer()};
  }
  return totals;
}

} // namespace limitcounter::detail
