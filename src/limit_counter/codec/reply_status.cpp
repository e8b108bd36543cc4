#include "limit_counter/codec/reply_status.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include <limitcounter/error.hpp>
#include <limitcounter/key_part.hpp>

namespace limitcounter::detail {

namespace {

constexpr std::array<std::pair<ReplyStatus, std::string_view>, 25> words{{
    {ReplyStatus::adopted, "adopted"},     {ReplyStatus::already, "already"},
    {ReplyStatus::bad_state, "bad_state"}, {ReplyStatus::cancelled, "cancelled"},
    {ReplyStatus::changed, "changed"},     {ReplyStatus::closed, "closed"},
    {ReplyStatus::confirmed, "confirmed"}, {ReplyStatus::conflict, "conflict"},
    {ReplyStatus::exists, "exists"},       {ReplyStatus::expired, "expired"},
    {ReplyStatus::final_, "final"},        {ReplyStatus::first, "first"},
    {ReplyStatus::follow, "follow"},       {ReplyStatus::go, "go"},
    {ReplyStatus::mismatch, "mismatch"},   {ReplyStatus::missing, "missing"},
    {ReplyStatus::needs, "needs"},         {ReplyStatus::none, "none"},
    {ReplyStatus::pending, "pending"},     {ReplyStatus::record, "record"},
    {ReplyStatus::refunded, "refunded"},   {ReplyStatus::tombstone, "tombstone"},
    {ReplyStatus::too_much, "too_much"},   {ReplyStatus::unknown, "unknown"},
    {ReplyStatus::voided, "voided"},
}};

// (to_string indexes `words` by the status)
constexpr bool in_status_order() {
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (static_cast<std::size_t>(words[i].first) != i) {
      return false;
    }
  }
  return true;
}
static_assert(in_status_order());

} // namespace

ReplyStatus reply_status(const Reply& reply) {
  const std::string& word = reply.at(0).as_string();
  const auto found = std::find_if(words.begin(), words.end(),
                                  [&](const auto& entry) { return entry.second == word; });
  if (found == words.end()) {
    throw Error(errc::protocol_error,
                "a limit script's reply begins with no status it has: " + quote_for_message(word) +
                    " in " + reply.debug_string(),
                Outcome::unknown);
  }
  return found->first;
}

std::string_view to_string(ReplyStatus status) {
  return words[static_cast<std::size_t>(status)].second;
}

} // namespace limitcounter::detail
