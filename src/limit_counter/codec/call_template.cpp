#include "limit_counter/codec/call_template.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <iterator>

#include "limit_counter/codec/rule_args.hpp"
#include "limit_counter/rule_matching.hpp"
#include "limit_counter/window_closed.hpp"
#include "shared/amount.hpp"
#include "shared/msgpack.hpp"

namespace limitcounter::detail {

namespace {

// Appends `value` in decimal, without a string of its own.
void append_number(std::string& text, std::int64_t value) {
  char digits[24];
  const auto end = std::to_chars(std::begin(digits), std::end(digits), value).ptr;
  text.append(digits, static_cast<std::size_t>(end - digits));
}

// Whether `a` and `b` count by the same attributes, so that their counters' fields are equal.
bool same_dimension(const Rule& a, const Rule& b) {
  return std::equal(
      a.conditions().begin(), a.conditions().end(), b.conditions().begin(), b.conditions().end(),
      [](const Condition& x, const Condition& y) { return x.attribute == y.attribute; });
}

// Appends the field `rule` counts `transaction` under (dimension_field, without a string).
void append_field(std::string& text, const Rule& rule, const Transaction& transaction) {
  bool first = true;
  for (const auto& condition : rule.conditions()) {
    text.append(first ? "" : "+").append(transaction.attributes.at(condition.attribute));
    first = false;
  }
}

} // namespace

CallTemplate::CallTemplate(const Transaction& transaction,
                           const std::vector<const Rule*>& per_transaction,
                           const std::vector<const Rule*>& window,
                           const std::vector<Window>& windows, const std::string& record_key,
                           const DecideContext& context)
    : keys(context.keys), grace(context.window_grace), horizon(context.replay_horizon),
      per_transaction_rules(per_transaction), window_rules(window) {
  const std::size_t n = window.size();
  std::vector<RuleArgs> own_args;      // without context.rule_args: built for this call
  own_args.reserve(n);                 // never reallocated: `args_of` points at its elements
  std::vector<std::size_t> counter_of; // per window rule: its counter's index
  std::vector<const Window*> counter_windows;
  std::vector<const RuleArgs*> args_of;
  window_ends.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const Rule* rule = window[i];
    const Window& in = windows[i];
    window_ends.push_back(in.end);
    const RuleArgs* args = context.rule_args != nullptr ? context.rule_args->find(rule) : nullptr;
    if (args == nullptr) {
      args = &own_args.emplace_back(rule_args(*rule, *context.keys));
    }
    args_of.push_back(args);
    const Period period = *rule->period();
    std::string key;
    if (!args->window_key_head.empty()) {
      const std::string_view period_name = to_string(period);
      key.reserve(args->window_key_head.size() + period_name.size() + 1 + in.id.size());
      key.append(args->window_key_head).append(period_name).push_back(':');
      key.append(in.id);
    } else { // the tag, and so the key, depends on the dimension value
      const std::string tag =
          context.keys->tag(args->counter_name, dimension_field(*rule, transaction));
      key = context.keys->window(tag, period, in.id);
    }
    // one counter per key: a shape (and so its dimension) and a window make a key
    const auto same = std::find(counter_keys.begin(), counter_keys.end(), key);
    counter_of.push_back(static_cast<std::size_t>(same - counter_keys.begin()));
    if (same == counter_keys.end()) {
      hold_keys.push_back(CounterKeys::window_holds(key));
      counter_keys.push_back(std::move(key));
      counter_windows.push_back(&in);
      shape.counters.push_back({period, in.id, in.end});
      std::size_t field = 0;
      while (field < field_rules.size() && !same_dimension(*field_rules[field], *rule)) {
        ++field;
      }
      if (field == field_rules.size()) {
        field_rules.push_back(rule);
      }
      field_numbers.push_back(field + 1);
    }
  }

  append_number(text, static_cast<std::int64_t>(counter_keys.size()));
  if (!counter_windows.empty()) {
    // When the set expires: a decision writes its record (kept the replay horizon) only while
    // every one of its windows is open, so after the first window's end and grace, the horizon
    // and an hour (the clocks of other callers) no record a decision wrote names it. In the
    // text, so in its name: a decision never extends a set, one command reads (or makes) it.
    TimePoint first_end = counter_windows.front()->end;
    for (const Window* in : counter_windows) {
      first_end = std::min(first_end, in->end);
    }
    text.push_back(' ');
    append_number(text, unix_millis(first_end + context.window_grace + context.replay_horizon +
                                    counter_set_margin));
  }
  for (std::size_t j = 0; j < counter_keys.size(); ++j) {
    text.append(1, '\n').append(counter_keys[j]).append(1, ' ');
    append_number(text, static_cast<std::int64_t>(field_numbers[j]));
  }
  for (const std::string& hold : hold_keys) {
    text.append(1, '\n').append(hold);
  }
  // 48 bits: few distinct sets (one per rules, windows and buckets), and a collision is
  // refused by the script before it writes anything, never silent
  Digest digest;
  digest.add(text);
  name = digest.text(8);
  // Without counters the script never touches a counter set: the record's own key stands in,
  // so that a cluster's home key (a transaction without window rules) names one slot.
  set_key = counter_keys.empty() ? record_key : counter_set_key(record_key, name);

  const std::size_t rule_count = per_transaction.size() + n;
  shape.rules.reserve(rule_count);
  for (const Rule* rule : per_transaction) {
    names.append(names.empty() ? "" : " ").append(rule->name());
    shape.rules.push_back({rule, 0});
  }
  for (std::size_t i = 0; i < n; ++i) {
    names.append(names.empty() ? "" : " ").append(window[i]->name());
    shape.rules.push_back({window[i], counter_of[i] + 1});
  }
  const std::size_t c = counter_keys.size();
  append_msgpack_array(program, 3 + 2 * c + 3 * rule_count);
  append_msgpack_int(program, static_cast<std::int64_t>(hold_keys.size()));
  append_msgpack_int(program, static_cast<std::int64_t>(c));
  // (the keys' expiries as text: the script passes them to PEXPIREAT, and Redis formats a number
  // argument of a command with snprintf, more than the command itself costs)
  for (const Window* in : counter_windows) {
    append_msgpack_string(program, std::to_string(unix_millis(in->end + context.window_grace)));
  }
  for (const std::size_t field : field_numbers) {
    append_msgpack_int(program, static_cast<std::int64_t>(field));
  }
  append_msgpack_int(program, static_cast<std::int64_t>(rule_count));
  for (const Rule* rule : per_transaction) {
    append_msgpack_int(program, 0);
    append_msgpack_int(program, -1);
    append_msgpack_int(program, rule->max_amount().value_or(-1));
  }
  for (std::size_t i = 0; i < n; ++i) {
    append_msgpack_int(program, static_cast<std::int64_t>(counter_of[i] + 1));
    append_msgpack_int(program, window[i]->max_count().value_or(-1));
    append_msgpack_int(program, window[i]->max_amount().value_or(-1));
  }
}

std::string CallTemplate::fields_word(const Transaction& transaction) const {
  std::string word;
  for (const Rule* rule : field_rules) {
    if (!word.empty()) {
      word.push_back(':');
    }
    append_field(word, *rule, transaction);
  }
  return word;
}

std::vector<Window> windows_of(const Transaction& transaction,
                               const std::vector<const Rule*>& window_rules,
                               const DecideContext& context) {
  std::array<const Window*, 6> by_period{};
  std::vector<Window> windows;
  windows.reserve(window_rules.size());
  for (const Rule* rule : window_rules) {
    const Period period = *rule->period();
    const Window*& known = by_period[static_cast<std::size_t>(period)];
    if (known != nullptr) {
      windows.push_back(*known);
      continue;
    }
    windows.push_back(context.calendar->window(period, transaction.time));
    if (context.refuse_closed_windows) {
      check_window_open(rule->counter_name(), period, windows.back(), context.window_grace,
                        context.now);
    }
    known = &windows.back(); // (reserved: never reallocated)
  }
  return windows;
}

const CallTemplate& call_template(const Transaction& transaction,
                                  const std::vector<const Rule*>& per_transaction_rules,
                                  const std::vector<const Rule*>& window_rules,
                                  const std::string& record, const DecideContext& context,
                                  std::optional<CallTemplate>& own) {
  const std::vector<Window> windows = windows_of(transaction, window_rules, context);
  const bool reusable =
      context.rule_args != nullptr && context.record_key == nullptr && context.keys->buckets() == 1;
  if (!reusable) {
    return own.emplace(transaction, per_transaction_rules, window_rules, windows, record, context);
  }
  std::vector<TimePoint> ends;
  ends.reserve(windows.size());
  for (const Window& window : windows) {
    ends.push_back(window.end);
  }
  // A few per thread: a host deciding under one rule set matches a few rule combinations.
  thread_local std::array<std::optional<CallTemplate>, 4> kept;
  thread_local std::size_t next = 0;
  for (const auto& candidate : kept) {
    if (candidate && candidate->fits(per_transaction_rules, window_rules, ends, context)) {
      return *candidate;
    }
  }
  auto& slot = kept[next++ % kept.size()];
  slot.emplace(transaction, per_transaction_rules, window_rules, windows, record, context);
  slot->rule_set_id = context.rule_args->id();
  return *slot;
}

} // namespace limitcounter::detail
