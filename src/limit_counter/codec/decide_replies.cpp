#include "limit_counter/codec/decide_replies.hpp"

#include <limitcounter/error.hpp>

#include "limit_counter/codec/common.hpp"
#include "limit_counter/codec/record_text.hpp"
#include "limit_counter/codec/reply_status.hpp"

namespace limitcounter::detail {

namespace {

// The reply codes of lua/limit.lua's decide ops (the first value of a transaction's reply).
enum class DecideCode : std::int64_t {
  allowed = 1,
  denied = 2,
  would_allow = 3,
  would_deny = 4,
  replay = 5,
  conflict = 6,
  cancelled = 7,
  overflow = 8,
};

// How many values the transaction reply at items[at] has (its code, c, 2c totals, the code's
// extras); 0 if it is not one.
std::size_t decide_reply_length(const std::vector<Reply>& items, std::size_t at) {
  if (at >= items.size() || items[at].type() != Reply::Type::integer) {
    return 0;
  }
  switch (static_cast<DecideCode>(items[at].as_integer())) {
  case DecideCode::conflict:
  case DecideCode::cancelled: return 1;
  case DecideCode::overflow: return 2;
  case DecideCode::allowed:
  case DecideCode::would_allow:
  case DecideCode::denied:
  case DecideCode::would_deny:
  case DecideCode::replay: {
    if (at + 1 >= items.size() || items[at + 1].type() != Reply::Type::integer) {
      return 0;
    }
    const std::int64_t counters = items[at + 1].as_integer();
    const auto code = static_cast<DecideCode>(items[at].as_integer());
    const bool extras = code != DecideCode::allowed && code != DecideCode::would_allow;
    if (counters < 0 || static_cast<std::uint64_t>(counters) > items.size()) {
      return 0;
    }
    return 2 + 2 * static_cast<std::size_t>(counters) + (extras ? 2 : 0);
  }
  }
  return 0;
}

} // namespace

std::vector<Reply> split_decide_replies(const Reply& reply, std::size_t count) {
  const auto bad = [&] {
    return Error(errc::protocol_error,
                 "a batch of " + std::to_string(count) +
                     " limit calls answered: " + reply.debug_string(),
                 Outcome::unknown);
  };
  if (reply.type() != Reply::Type::array) {
    throw bad();
  }
  const auto& items = reply.as_array();
  std::vector<Reply> replies;
  replies.reserve(count);
  std::size_t at = 0;
  while (at < items.size() && replies.size() < count) {
    const std::size_t length = decide_reply_length(items, at);
    if (length == 0 || at + length > items.size()) {
      throw bad();
    }
    const auto from = items.begin() + static_cast<std::ptrdiff_t>(at);
    replies.push_back(
        Reply::array(std::vector<Reply>(from, from + static_cast<std::ptrdiff_t>(length))));
    at += length;
  }
  if (replies.size() != count || at != items.size()) {
    throw bad();
  }
  return replies;
}

Decision decode_decision(const Reply& reply, const DecideShape& shape,
                         std::string_view transaction_id, std::int64_t requested_amount) {
  const auto bad = [&](const char* what) {
    return Error(errc::protocol_error, "limit reply for " + quoted_id(transaction_id) + ": " + what,
                 Outcome::unknown);
  };
  if (reply.type() != Reply::Type::array) {
    throw bad("not an array");
  }
  const auto& items = reply.as_array();
  if (items.empty()) {
    throw bad("empty");
  }
  if (decide_reply_length(items, 0) != items.size()) {
    throw bad("not one transaction's reply");
  }
  const auto code = static_cast<DecideCode>(items[0].as_integer());
  if (code == DecideCode::conflict) {
    throw reused_id(transaction_id);
  }
  if (code == DecideCode::overflow) {
    const auto counter = static_cast<std::size_t>(items[1].to_int64());
    std::size_t rule = 0;
    while (rule < shape.rules.size() && shape.rules[rule].counter != counter) {
      ++rule;
    }
    if (rule == shape.rules.size() || counter == 0 || counter > shape.counters.size()) {
      throw bad("an overflow names no counter");
    }
    throw Error(errc::precision_overflow,
                quoted_id(transaction_id) + " would take the " +
                    std::string(to_string(shape.counters[counter - 1].period)) + " total of " +
                    shape.rules[rule].rule->counter_name() + " past 2^53 - 1; nothing was written",
                Outcome::failed);
  }
  Decision decision;
  if (code == DecideCode::cancelled) {
    decision.verdict = Decision::Verdict::cancelled;
    decision.replayed = true;
    decision.state = TransactionState::cancelled;
    return decision;
  }
  if (static_cast<std::size_t>(items[1].as_integer()) != shape.counters.size()) {
    throw bad("not the call's counters");
  }
  const std::size_t extras = 2 + 2 * shape.counters.size();
  std::int64_t denied_rule = 0;
  bool by_count = false;
  if (code == DecideCode::replay) {
    decision.replayed = true;
    decision.state =
        transaction_state(items[extras].as_string(), "the replay of " + quoted_id(transaction_id));
    if (decision.state == TransactionState::denied) {
      decision.verdict = Decision::Verdict::denied;
      decision.denial =
          decode_denial(items[extras + 1].as_string(), transaction_id, requested_amount);
    }
  } else {
    decision.dry_run = code == DecideCode::would_allow || code == DecideCode::would_deny;
    const bool allowed = code == DecideCode::allowed || code == DecideCode::would_allow;
    decision.verdict = allowed ? Decision::Verdict::allowed : Decision::Verdict::denied;
    if (!allowed) {
      denied_rule = items[extras].to_int64();
      if (denied_rule < 1 || static_cast<std::size_t>(denied_rule) > shape.rules.size()) {
        throw bad("a denial names no rule");
      }
      const std::int64_t metric = items[extras + 1].to_int64();
      if (metric < 1 || metric > 3) {
        throw bad("a denial names no metric");
      }
      by_count = metric == 1;
    }
  }
  decision.rules.reserve(shape.rules.size());
  for (std::size_t i = 0; i < shape.rules.size(); ++i) {
    const auto& [rule, counter] = shape.rules[i];
    const bool denier = static_cast<std::int64_t>(i) + 1 == denied_rule;
    if (counter == 0) { // a per-transaction rule: no counter, no window
      if (denier) {
        decision.denial =
            Denial{rule->name(), Metric::single_amount, *rule->max_amount(), 0, requested_amount};
      }
      continue;
    }
    const DecideShape::Counter& place = shape.counters[counter - 1];
    RuleStatus& status = decision.rules.emplace_back();
    status.rule = rule->name();
    status.period = place.period;
    status.window_id = place.window_id;
    status.resets_at = place.resets_at;
    status.max_count = rule->max_count();
    status.max_amount = rule->max_amount();
    status.used = {items[2 * counter].to_int64(), items[1 + 2 * counter].to_int64()};
    if (denier) {
      if (!(by_count ? status.max_count : status.max_amount)) {
        throw bad("a denial names a metric its rule does not limit");
      }
      decision.denial = Denial{status.rule, by_count ? Metric::count : Metric::amount,
                               by_count ? *status.max_count : *status.max_amount,
                               by_count ? status.used.count : status.used.amount,
                               by_count ? 1 : requested_amount};
    }
  }
  return decision;
}

} // namespace limitcounter::detail
