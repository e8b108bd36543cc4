#include "limit_counter/transition_table.hpp"

namespace limitcounter::detail {

namespace {

// Names in enum order (the unit test checks that each names its own value).
template <typename Enum, std::size_t n>
std::string_view name_of(Enum value, const std::array<std::string_view, n>& names) noexcept {
  const auto i = static_cast<std::size_t>(value);
  return i < n ? names[i] : std::string_view{"?"};
}

} // namespace

std::string_view to_string(TxState state) noexcept {
  static constexpr std::array<std::string_view, tx_state_count> names{
      "none",    "consumed", "reserved",  "confirmed",         "cancelled",
      "expired", "denied",   "tombstone", "refunded_consumed", "refunded_confirmed"};
  return name_of(state, names);
}

std::string_view to_string(TxOperation operation) noexcept {
  static constexpr std::array<std::string_view, tx_operation_count> names{
      "consume", "reserve", "confirm", "cancel", "refund_full", "expire"};
  return name_of(operation, names);
}

std::string_view to_string(Answer answer) noexcept {
  static constexpr std::array<std::string_view, answer_count> names{
      "allowed",         "denied",         "refused_cancelled", "replayed_allowed",
      "replayed_denied", "confirmed",      "confirm_replayed",  "cancelled",
      "cancel_replayed", "cancel_expired", "recorded_unknown",  "refunded",
      "refund_replayed", "error_conflict", "error_not_found",   "silent"};
  return name_of(answer, names);
}

} // namespace limitcounter::detail
