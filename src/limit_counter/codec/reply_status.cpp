#include "limit_counter/codec/reply_status.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include <limitcounter/error.hpp>
#include <limitcounter/key_part.hpp>

namespace limitcounter::detail {

namespace {

constexpr std::array<std::pair<ReplyStatus, std::string_view>, 26> words{{
    {ReplyStatus::adopted, "adopted"},     {ReplyStatus::already, "already"},
    {ReplyStatus::bad_state, "bad_state"}, {ReplyStatus::cancelled, "cancelled"},
    {ReplyStatus::changed, "changed"},     {ReplyStatus::closed, "closed"},
    {ReplyStatus::confirmed, "confirmed"}, {ReplyStatus::conflict, "conflict"},
    {ReplyStatus::exists, "exists"},       {ReplyStatus::expired, "expired"},
    {ReplyStatus::final_, "final"},        {ReplyStatus::first, "first"},
    {ReplyStatus::follow, "follow"},       {ReplyStatus::go, "go"},
    {ReplyStatus::mismatch, "mismatch"},   {ReplyStatus::missing, "missing"},
    {ReplyStatus::needs, "needs"},         {ReplyStatus::none, "none"},
    {ReplyStatus::other, "other"},         {ReplyStatus::pending, "pending"},
    {ReplyStatus::record, "record"},       {ReplyStatus::refunded, "refunded"},
    {ReplyStatus::tombstone, "tombstone"}, {ReplyStatus::too_much, "too_much"},
    {ReplyStatus::unknown, "unknown"},     {ReplyStatus::voided, "voided"},
}};

constexpr std::array<std::pair<TransactionState, std::string_view>, 10> state_words{{
    {TransactionState::none, "none"},
    {TransactionState::consumed, "consumed"},
    {TransactionState::denied, "denied"},
    {TransactionState::reserved, "reserved"},
    {TransactionState::confirmed, "confirmed"},
    {TransactionState::cancelled, "cancelled"},
    {TransactionState::expired, "expired"},
    {TransactionState::voided, "voided"},
    {TransactionState::pending, "pending"},
    {TransactionState::tombstone, "tombstone"},
}};

// (each to_string indexes its table by the enum)
template <typename Table> constexpr bool in_enum_order(const Table& table) {
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (static_cast<std::size_t>(table[i].first) != i) {
      return false;
    }
  }
  return true;
}
static_assert(in_enum_order(words));
static_assert(in_enum_order(state_words));

// The entry of `table` whose word is `word` (its end if none).
template <typename Table> auto find_word(const Table& table, std::string_view word) {
  return std::find_if(table.begin(), table.end(),
                      [&](const auto& entry) { return entry.second == word; });
}

} // namespace

ReplyStatus reply_status(const Reply& reply) {
  const std::string& word = reply.at(0).as_string();
  const auto found = find_word(words, word);
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

TransactionState transaction_state(std::string_view word, std::string_view where) {
  const auto found = find_word(state_words, word);
  if (found == state_words.end()) {
    throw Error(errc::protocol_error,
                "no transaction state is named " + quote_for_message(word) + " (in " +
                    std::string(where) + ")",
                Outcome::unknown);
  }
  return found->first;
}

} // namespace limitcounter::detail

namespace limitcounter {

std::string_view to_string(TransactionState state) noexcept {
  const auto i = static_cast<std::size_t>(state);
  return i < detail::state_words.size() ? detail::state_words[i].second : std::string_view{"?"};
}

} // namespace limitcounter
