// Properties of the limits transaction state machine (src/limit_counter/transition_table.hpp)
// that hold whatever the topology; tests/redis/transition_table_test.cpp holds Redis to each row.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "limit_counter/transition_table.hpp"

using namespace limitcounter::detail;

namespace {

std::vector<TxState> all_states() {
  std::vector<TxState> out;
  for (std::size_t i = 0; i < tx_state_count; ++i) {
    out.push_back(static_cast<TxState>(i));
  }
  return out;
}

std::vector<TxOperation> all_operations() {
  std::vector<TxOperation> out;
  for (std::size_t i = 0; i < tx_operation_count; ++i) {
    out.push_back(static_cast<TxOperation>(i));
  }
  return out;
}

std::string row_name(TxState from, TxOperation operation) {
  return std::string(to_string(from)) + " + " + std::string(to_string(operation));
}

bool is_replay(Answer answer) {
  return answer == Answer::replayed_allowed || answer == Answer::replayed_denied ||
         answer == Answer::refused_cancelled || answer == Answer::confirm_replayed ||
         answer == Answer::cancel_replayed || answer == Answer::refund_replayed;
}

bool is_error(Answer answer) {
  return answer == Answer::error_conflict || answer == Answer::error_not_found;
}

// The answers each operation's result type can carry.
std::set<Answer> answers_of(TxOperation operation) {
  switch (operation) {
  case TxOperation::consume:
  case TxOperation::reserve:
    return {Answer::allowed,          Answer::denied,          Answer::refused_cancelled,
            Answer::replayed_allowed, Answer::replayed_denied, Answer::error_conflict};
  case TxOperation::confirm:
    return {Answer::confirmed, Answer::confirm_replayed, Answer::error_conflict,
            Answer::error_not_found};
  case TxOperation::cancel:
    return {Answer::cancelled, Answer::cancel_replayed, Answer::cancel_expired,
            Answer::recorded_unknown, Answer::error_conflict};
  case TxOperation::refund_full:
    return {Answer::refunded, Answer::refund_replayed, Answer::error_conflict,
            Answer::error_not_found};
  case TxOperation::expire: return {Answer::silent};
  }
  return {};
}

// Every state some sequence of operations leads to from `from`.
std::set<TxState> reachable(TxState from) {
  std::set<TxState> seen{from};
  std::vector<TxState> todo{from};
  while (!todo.empty()) {
    const TxState state = todo.back();
    todo.pop_back();
    for (const TxOperation operation : all_operations()) {
      const TxState next = transition(state, operation).next;
      if (seen.insert(next).second) {
        todo.push_back(next);
      }
    }
  }
  return seen;
}

} // namespace

TEST_CASE("the transition table has exactly one row per state and operation, in order",
          "[transitions]") {
  static_assert(transition_rows.size() == tx_state_count * tx_operation_count);
  for (std::size_t i = 0; i < transition_rows.size(); ++i) {
    INFO("row " << i);
    CHECK(transition_rows[i].from == static_cast<TxState>(i / tx_operation_count));
    CHECK(transition_rows[i].operation == static_cast<TxOperation>(i % tx_operation_count));
  }
}

TEST_CASE("the transition table's names are distinct and each names its own value",
          "[transitions]") {
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < tx_state_count; ++i) {
    names.insert(to_string(static_cast<TxState>(i)));
  }
  for (std::size_t i = 0; i < tx_operation_count; ++i) {
    names.insert(to_string(static_cast<TxOperation>(i)));
  }
  for (std::size_t i = 0; i < answer_count; ++i) {
    names.insert(to_string(static_cast<Answer>(i)));
  }
  CHECK(names.count("?") == 0);
  // operations and answers share some words with states ("confirmed", "cancelled", "denied")
  CHECK(names.size() == tx_state_count + tx_operation_count + answer_count - 3);
  CHECK(to_string(TxState::refunded_confirmed) == "refunded_confirmed");
  CHECK(to_string(TxOperation::expire) == "expire");
  CHECK(to_string(Answer::silent) == "silent");
}

TEST_CASE("each operation answers only what its result type can say", "[transitions]") {
  for (const TxState from : all_states()) {
    for (const TxOperation operation : all_operations()) {
      INFO(row_name(from, operation)
           << " answers " << to_string(transition(from, operation).answer));
      CHECK(answers_of(operation).count(transition(from, operation).answer) == 1);
    }
  }
}

TEST_CASE("replays, errors and silences leave the state as it was", "[transitions]") {
  for (const TxState from : all_states()) {
    for (const TxOperation operation : all_operations()) {
      const auto [next, answer] = transition(from, operation);
      if (is_replay(answer) || is_error(answer) ||
          (answer == Answer::silent && from != TxState::reserved)) {
        INFO(row_name(from, operation));
        CHECK(next == from);
      }
    }
  }
}

TEST_CASE("every operation is idempotent: repeated, it changes nothing and replays or refuses",
          "[transitions]") {
  for (const TxState from : all_states()) {
    for (const TxOperation operation : all_operations()) {
      const TxState once = transition(from, operation).next;
      const auto [twice, answer] = transition(once, operation);
      INFO(row_name(from, operation) << " twice answers " << to_string(answer));
      CHECK(twice == once);
      if (once != from) { // the first changed something: the second only reports it
        CHECK((is_replay(answer) || answer == Answer::cancel_expired || answer == Answer::silent));
      }
    }
  }
}

TEST_CASE("terminal states stay put under every operation but a refund of what was counted",
          "[transitions]") {
  for (const TxState from : all_states()) {
    if (from == TxState::none || from == TxState::reserved) {
      continue; // not terminal
    }
    for (const TxOperation operation : all_operations()) {
      const bool refund_of_counted = operation == TxOperation::refund_full &&
                                     (from == TxState::consumed || from == TxState::confirmed);
      INFO(row_name(from, operation));
      CHECK((transition(from, operation).next == from) == !refund_of_counted);
    }
  }
}

TEST_CASE("a confirmed transaction is never cancelled, nor a cancelled one confirmed",
          "[transitions]") {
  for (const TxState state : reachable(TxState::confirmed)) {
    INFO(to_string(state));
    CHECK(state != TxState::cancelled);
    CHECK(state != TxState::expired);
    CHECK(transition(state, TxOperation::cancel).answer == Answer::error_conflict);
  }
  for (const TxState state : reachable(TxState::cancelled)) {
    INFO(to_string(state));
    CHECK(state == TxState::cancelled);
    CHECK(transition(state, TxOperation::confirm).answer == Answer::error_conflict);
  }
}

TEST_CASE("every state but denied is reachable from a fresh id; only a reservation is undone",
          "[transitions]") {
  // all but denied: the limits, not the state, decide a denial (the table's consume and reserve
  // are of a transaction with room)
  const std::set<TxState> from_fresh = reachable(TxState::none);
  CHECK(from_fresh.size() == tx_state_count - 1);
  CHECK(from_fresh.count(TxState::denied) == 0);
  for (const TxState from : all_states()) {
    for (const TxOperation operation : all_operations()) {
      const TxState next = transition(from, operation).next;
      if (next == TxState::cancelled || next == TxState::expired) {
        INFO(row_name(from, operation));
        CHECK((from == TxState::reserved || from == next));
      }
    }
  }
}

TEST_CASE("a refund is refused for anything that counts nothing", "[transitions]") {
  for (const TxState from : all_states()) {
    const Answer answer = transition(from, TxOperation::refund_full).answer;
    INFO(to_string(from));
    const bool counted = from == TxState::consumed || from == TxState::confirmed ||
                         from == TxState::refunded_consumed || from == TxState::refunded_confirmed;
    CHECK(is_error(answer) == !counted);
  }
}
