#include "limit_counter/limit_codec.hpp"

#include <algorithm>
#include <array>
#include <iterator>
#include <optional>

#include <limitcounter/error.hpp>

#include "limit_counter/rule_matching.hpp"
#include "limit_counter/window_closed.hpp"
#include "shared/amount.hpp"

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

namespace {

constexpr std::array<Metric, 4> metrics{Metric::count, Metric::amount, Metric::single_amount,
                                        Metric::unavailable};

std::string limit_arg(std::optional<std::int64_t> limit) {
  return limit ? std::to_string(*limit) : std::string("-1");
}

// FNV-1a 64, fed piece by piece (no string of the whole is built).
class Digest {
public:
  void add(std::string_view text) noexcept {
    for (const char c : text) {
      hash_ = (hash_ ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
    }
  }
  std::string hex() const {
    static constexpr char digits[] = "0123456789abcdef";
    std::string text(16, '0');
    for (int i = 0; i < 16; ++i) {
      text[static_cast<std::size_t>(15 - i)] = digits[(hash_ >> (4 * i)) & 0xF];
    }
    return text;
  }

private:
  std::uint64_t hash_ = 0xcbf29ce484222325ULL;
};

// The counters and hold sets of a transaction's window rules, one counter per key and field.
struct CounterPlan {
  struct Counter {
    std::string key;
    std::string field;
    Period period;
    const Window* window;
  };
  std::array<std::optional<Window>, 6> windows; // one per period at most, shared by its rules
  std::vector<Counter> counters;
  std::vector<std::string> holds;
  std::vector<std::size_t> counter_of_rule; // per window rule: its counter's index
  std::string text;                         // the counter set's text (lua/limit.lua)
  std::string name;                         // its digest

  CounterPlan(const Transaction& transaction, const std::vector<const Rule*>& window_rules,
              const DecideContext& context) {
    counters.reserve(window_rules.size());
    counter_of_rule.reserve(window_rules.size());
    for (const Rule* rule : window_rules) {
      const Period period = *rule->period();
      auto& window = windows[static_cast<std::size_t>(period)];
      const std::string counter_name = rule->counter_name();
      if (!window) {
        window = context.calendar->window(period, transaction.time);
        if (context.refuse_closed_windows) {
          check_window_open(counter_name, period, *window, context.window_grace, context.now);
        }
      }
      std::string field = dimension_field(*rule, transaction);
      const std::string tag = context.keys->tag(counter_name, field);
      std::string key = context.keys->window(tag, period, window->id);
      const auto same = std::find_if(counters.begin(), counters.end(), [&](const Counter& c) {
        return c.key == key && c.field == field;
      });
      counter_of_rule.push_back(static_cast<std::size_t>(same - counters.begin()));
      if (same == counters.end()) {
        counters.push_back({std::move(key), std::move(field), period, &*window});
      }
      std::string hold = context.keys->holds(tag);
      if (std::find(holds.begin(), holds.end(), hold) == holds.end()) {
        holds.push_back(std::move(hold));
      }
    }
    text = std::to_string(counters.size());
    for (const auto& counter : counters) {
      text.append(1, '\n').append(counter.key).append(1, ' ').append(counter.field);
    }
    for (const auto& hold : holds) {
      text.append(1, '\n').append(hold);
    }
    Digest digest;
    digest.add(text);
    name = digest.hex();
  }
};

std::string record_key_of(const Transaction& transaction, const DecideContext& context) {
  return context.record_key != nullptr ? *context.record_key
                                       : context.keys->transaction(transaction.id);
}

} // namespace

std::string fingerprint(std::string_view op, const Transaction& transaction) {
  // Each part with its length, so that no split of the same characters into other attributes
  // or values gives the same text.
  Digest digest;
  const auto part = [&digest](std::string_view text) {
    digest.add(std::to_string(text.size()));
    digest.add(":");
    digest.add(text);
  };
  part(op);
  for (const auto& [attribute, value] : transaction.attributes) {
    part(attribute);
    part(value);
  }
  return digest.hex();
}

std::string counter_set_key(std::string_view record_key, std::string_view name) {
  std::string key;
  if (!record_key.empty() && record_key.back() == '}') { // <prefix>tx:{<id>}
    key = std::string(record_key.substr(0, record_key.find('{') - 3)) + "cs:";
  } else { // <prefix>{<tag>}:tx:<id>
    key = std::string(record_key.substr(0, record_key.find('}') + 1)) + ":cs:";
  }
  return key.append(name);
}

LimitCall build_decide(std::string_view op, const Transaction& transaction,
                       const std::vector<const Rule*>& per_transaction_rules,
                       const std::vector<const Rule*>& window_rules, const DecideContext& context) {
  const CounterPlan plan(transaction, window_rules, context);
  const TimePoint hold_expiry = context.now + context.reservation_timeout;
  // The replay horizon, whatever the windows; never shorter than a hold.
  TimePoint record_expiry = std::max(context.now + context.replay_horizon, hold_expiry);
  if (op == "reserve") {
    // Until its windows' keys expire: an expired hold is released through its record by the
    // next sweep of its shapes, however late (after that, the counters are gone with it).
    for (const auto& counter : plan.counters) {
      record_expiry = std::max(record_expiry, counter.window->end + context.window_grace);
    }
  }
  const bool records = op != "check";

  LimitCall call;
  std::string record = record_key_of(transaction, context);
  call.keys.reserve(2 + plan.counters.size());
  // Without counters the script never touches a counter set: the record's own key stands in,
  // so that a cluster's home key (a transaction without window rules) names one slot.
  call.keys.push_back(plan.counters.empty() ? record : counter_set_key(record, plan.name));
  call.keys.insert(call.keys.begin(), std::move(record));
  const std::size_t rule_count = per_transaction_rules.size() + window_rules.size();
  std::string names;
  call.shape.rules.reserve(rule_count);
  for (const Rule* rule : per_transaction_rules) {
    names.append(names.empty() ? "" : " ").append(rule->name());
    call.shape.rules.push_back({rule, 0});
  }
  for (std::size_t i = 0; i < window_rules.size(); ++i) {
    names.append(names.empty() ? "" : " ").append(window_rules[i]->name());
    call.shape.rules.push_back({window_rules[i], plan.counter_of_rule[i] + 1});
  }
  call.args.reserve(16 + 3 * rule_count + 2 * plan.counters.size());
  call.args = {std::string(op), "1", std::to_string(unix_millis(context.now)),
               std::to_string(unix_millis(record_expiry)), std::to_string(unix_millis(hold_expiry)),
               "1",
               // the program: the rules this transaction matched, its windows' key expiries
               std::to_string(plan.holds.size()), std::to_string(plan.counters.size())};
  for (const auto& counter : plan.counters) {
    call.args.push_back(std::to_string(unix_millis(counter.window->end + context.window_grace)));
  }
  call.args.push_back(std::move(names));
  call.args.push_back(std::to_string(rule_count));
  for (const auto& [rule, counter] : call.shape.rules) {
    call.args.push_back(std::to_string(counter));
    call.args.push_back(counter == 0 ? std::string("-1") : limit_arg(rule->max_count()));
    call.args.push_back(limit_arg(rule->max_amount()));
  }
  // the transaction
  call.args.push_back("1");
  call.args.push_back(fingerprint(op, transaction));
  call.args.push_back(std::to_string(transaction.amount));
  call.args.push_back(records ? plan.name : std::string());
  // (a check keeps no set, but the script finds the hold sets in its text)
  call.args.push_back(plan.text);
  call.shape.counters.reserve(plan.counters.size());
  for (const auto& counter : plan.counters) {
    call.keys.push_back(counter.key); // one key per counter: a shape and a period make a key
    call.args.push_back(counter.field);
    call.shape.counters.push_back({counter.period, counter.window->id, counter.window->end});
  }
  return call;
}

namespace {

// Where a single decide call's program (h, c, c key expiries, names, r, the rules) and its
// transaction start.
constexpr std::size_t program_at = 6;
std::size_t transaction_at(const std::vector<std::string>& args) {
  const auto c = static_cast<std::size_t>(std::stoul(args.at(program_at + 1)));
  return program_at + 4 + c + 3 * static_cast<std::size_t>(std::stoul(args.at(program_at + 3 + c)));
}

} // namespace

const std::string& decide_fingerprint(const std::vector<std::string>& args) {
  return args.at(transaction_at(args) + 1);
}

const std::string& decide_amount(const std::vector<std::string>& args) {
  return args.at(transaction_at(args) + 2);
}

const std::string& decide_record_expiry(const std::vector<std::string>& args) { return args.at(3); }

void DecideBatch::add(std::vector<std::string>&& keys, std::vector<std::string>&& args) {
  const std::size_t at = transaction_at(args);
  if (size_ == 0) {
    header_.assign(std::make_move_iterator(args.begin() + 2),
                   std::make_move_iterator(args.begin() + program_at - 1));
  }
  // Transactions that matched the same rules share one program.
  const auto program_begin = args.begin() + program_at;
  const auto program_end = args.begin() + static_cast<std::ptrdiff_t>(at);
  std::size_t number = 0;
  while (
      number < programs_.size() &&
      !std::equal(programs_[number].begin(), programs_[number].end(), program_begin, program_end)) {
    ++number;
  }
  if (number == programs_.size()) {
    programs_.emplace_back(std::make_move_iterator(program_begin),
                           std::make_move_iterator(program_end));
  }
  transactions_.push_back(std::to_string(number + 1));
  transactions_.insert(transactions_.end(), std::make_move_iterator(program_end + 1),
                       std::make_move_iterator(args.end()));
  keys_.insert(keys_.end(), std::make_move_iterator(keys.begin()),
               std::make_move_iterator(keys.end()));
  ++size_;
}

std::pair<std::vector<std::string>, std::vector<std::string>> DecideBatch::take() {
  std::vector<std::string> args{"batch", std::to_string(size_)};
  args.insert(args.end(), header_.begin(), header_.end());
  args.push_back(std::to_string(programs_.size()));
  for (auto& program : programs_) {
    args.insert(args.end(), std::make_move_iterator(program.begin()),
                std::make_move_iterator(program.end()));
  }
  args.insert(args.end(), std::make_move_iterator(transactions_.begin()),
              std::make_move_iterator(transactions_.end()));
  auto taken = std::make_pair(std::move(keys_), std::move(args));
  *this = DecideBatch();
  return taken;
}

std::string append_original(std::vector<std::string>& args, const Transaction& original,
                            const std::vector<const Rule*>& window_rules,
                            const DecideContext& context) {
  const CounterPlan plan(original, window_rules, context);
  const std::string record = record_key_of(original, context);
  const bool any = !plan.counters.empty();
  args.push_back(fingerprint("consume", original));
  args.push_back(std::to_string(original.amount));
  args.push_back(any ? plan.name : std::string());
  args.push_back(any ? plan.text : std::string());
  args.push_back(std::to_string(unix_millis(context.now + context.replay_horizon)));
  args.push_back(fingerprint("reserve", original));
  return any ? counter_set_key(record, plan.name) : record;
}

Denial decode_denial(std::string_view text, std::string_view transaction_id,
                     std::int64_t requested_amount) {
  const auto words = split(text, ' ');
  const auto metric = words.size() == 4
                          ? std::find_if(metrics.begin(), metrics.end(),
                                         [&](Metric m) { return to_string(m) == words[1]; })
                          : metrics.end();
  if (metric == metrics.end()) {
    throw Error(errc::protocol_error,
                "the recorded denial of " + quoted_id(transaction_id) + " is not one: \"" +
                    std::string(text) + "\"",
                Outcome::unknown);
  }
  const auto number = [](std::string_view word) {
    return Reply::string(std::string(word)).to_int64();
  };
  return Denial{std::string(words[0]), *metric, number(words[2]), number(words[3]),
                *metric == Metric::count ? 1 : requested_amount};
}

Decision decode_decision(const Reply& reply, const DecideShape& shape,
                         std::string_view transaction_id, std::int64_t requested_amount) {
  const auto& items = reply.as_array();
  const auto bad = [&](const char* what) {
    return Error(errc::protocol_error, "limit reply for " + quoted_id(transaction_id) + ": " + what,
                 Outcome::unknown);
  };
  if (items.empty()) {
    throw bad("empty");
  }
  const std::string& head = items[0].as_string();
  if (head == "conflict") {
    throw reused_id(transaction_id);
  }
  if (head == "overflow") {
    const auto counter = static_cast<std::size_t>(reply.at(1).to_int64());
    std::size_t rule = 0;
    while (rule < shape.rules.size() && shape.rules[rule].counter != counter) {
      ++rule;
    }
    if (rule == shape.rules.size()) {
      throw bad("an overflow names no counter");
    }
    throw Error(errc::precision_overflow,
                quoted_id(transaction_id) + " would take the " +
                    std::string(to_string(shape.counters[counter - 1].period)) + " total of " +
                    shape.rules[rule].rule->counter_name() + " past 2^53 - 1; nothing was written",
                Outcome::failed);
  }
  Decision decision;
  if (head == "cancelled") {
    decision.verdict = Decision::Verdict::cancelled;
    decision.replayed = true;
    decision.state = "cancelled";
    return decision;
  }
  const bool replay = head == "replay";
  std::int64_t denied_rule = 0;
  if (replay) {
    decision.replayed = true;
    decision.state = reply.at(1).as_string();
    if (decision.state == "denied") {
      decision.verdict = Decision::Verdict::denied;
      decision.denial = decode_denial(reply.at(2).as_string(), transaction_id, requested_amount);
    }
  } else {
    decision.dry_run = head == "would_allow" || head == "would_deny";
    const bool allowed = head == "allowed" || head == "would_allow";
    if (!allowed && head != "denied" && head != "would_deny") {
      throw bad("unknown verdict");
    }
    decision.verdict = allowed ? Decision::Verdict::allowed : Decision::Verdict::denied;
    denied_rule = reply.at(1).to_int64();
    if (!allowed &&
        (denied_rule < 1 || static_cast<std::size_t>(denied_rule) > shape.rules.size())) {
      throw bad("a denial names no rule");
    }
  }
  if (static_cast<std::size_t>(reply.at(3).to_int64()) != shape.counters.size() ||
      items.size() != 4 + 2 * shape.counters.size()) {
    throw bad("not the call's counters");
  }
  const std::string metric = replay ? std::string() : reply.at(2).as_string();
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
    RuleStatus status;
    status.rule = rule->name();
    status.period = place.period;
    status.window_id = place.window_id;
    status.resets_at = place.resets_at;
    status.max_count = rule->max_count();
    status.max_amount = rule->max_amount();
    status.used = {items[2 + 2 * counter].to_int64(), items[3 + 2 * counter].to_int64()};
    if (denier) {
      const bool by_count = metric == "count";
      decision.denial = Denial{status.rule, by_count ? Metric::count : Metric::amount,
                               by_count ? *status.max_count : *status.max_amount,
                               by_count ? status.used.count : status.used.amount,
                               by_count ? 1 : requested_amount};
    }
    decision.rules.push_back(std::move(status));
  }
  return decision;
}

namespace {

std::vector<std::string_view> split_words(std::string_view line) { return split(line, ' '); }

std::string optional_text(const std::optional<std::int64_t>& value) {
  return value ? std::to_string(*value) : std::string("-1");
}

} // namespace

std::string encode_stored_decision(const Decision& decision) {
  std::string text = decision.verdict == Decision::Verdict::allowed  ? "allowed"
                     : decision.verdict == Decision::Verdict::denied ? "denied"
                                                                     : "cancelled";
  text += '\n';
  if (decision.denial) {
    const Denial& denial = *decision.denial;
    text.append(denial.rule)
        .append(1, ' ')
        .append(to_string(denial.metric))
        .append(1, ' ')
        .append(std::to_string(denial.limit))
        .append(1, ' ')
        .append(std::to_string(denial.used))
        .append(1, ' ')
        .append(std::to_string(denial.requested));
  } else {
    text += '-';
  }
  for (const RuleStatus& rule : decision.rules) {
    text.append(1, '\n')
        .append(rule.rule)
        .append(1, ' ')
        .append(to_string(rule.period))
        .append(1, ' ')
        .append(rule.window_id)
        .append(1, ' ')
        .append(std::to_string(unix_millis(rule.resets_at)))
        .append(1, ' ')
        .append(optional_text(rule.max_count))
        .append(1, ' ')
        .append(optional_text(rule.max_amount))
        .append(1, ' ')
        .append(std::to_string(rule.used.count))
        .append(1, ' ')
        .append(std::to_string(rule.used.amount));
  }
  return text;
}

Decision decode_stored_decision(std::string_view text, std::string_view transaction_id) {
  const auto bad = [&](const char* what) {
    return Error(errc::protocol_error,
                 "stored decision of transaction " + std::string(transaction_id) + ": " + what,
                 Outcome::unknown);
  };
  const auto number = [&](std::string_view word) {
    return Reply::string(std::string(word)).to_int64();
  };
  const auto optional_number = [&](std::string_view word) {
    const std::int64_t value = number(word);
    return value < 0 ? std::nullopt : std::optional<std::int64_t>(value);
  };
  const std::vector<std::string_view> lines = split(text, '\n');
  if (lines.size() < 2) {
    throw bad("too short");
  }
  Decision decision;
  if (lines[0] == "allowed") {
    decision.verdict = Decision::Verdict::allowed;
  } else if (lines[0] == "denied") {
    decision.verdict = Decision::Verdict::denied;
  } else if (lines[0] == "cancelled") {
    decision.verdict = Decision::Verdict::cancelled;
  } else {
    throw bad("unknown verdict");
  }
  if (lines[1] != "-") {
    const auto words = split_words(lines[1]);
    if (words.size() != 5) {
      throw bad("a denial of the wrong shape");
    }
    const auto metric = std::find_if(metrics.begin(), metrics.end(),
                                     [&](Metric m) { return to_string(m) == words[1]; });
    if (metric == metrics.end()) {
      throw bad("an unknown metric");
    }
    decision.denial = Denial{std::string(words[0]), *metric, number(words[2]), number(words[3]),
                             number(words[4])};
  }
  for (std::size_t i = 2; i < lines.size(); ++i) {
    const auto words = split_words(lines[i]);
    if (words.size() != 8) {
      throw bad("a rule of the wrong shape");
    }
    RuleStatus rule;
    rule.rule = std::string(words[0]);
    rule.period = parse_period(words[1]);
    rule.window_id = std::string(words[2]);
    rule.resets_at = TimePoint{std::chrono::milliseconds{number(words[3])}};
    rule.max_count = optional_number(words[4]);
    rule.max_amount = optional_number(words[5]);
    rule.used = {number(words[6]), number(words[7])};
    decision.rules.push_back(std::move(rule));
  }
  return decision;
}

} // namespace limitcounter::detail
