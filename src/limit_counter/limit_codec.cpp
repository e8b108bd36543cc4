#include "limit_counter/limit_codec.hpp"

#include <algorithm>
#include <array>
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

std::string limit_arg(std::optional<std::int64_t> limit) {
  return limit ? std::to_string(*limit) : std::string("-1");
}

// The lines of a call's description (ARGV[9]); views into `text`.
std::vector<std::string_view> split_lines(std::string_view text) { return split(text, '\n'); }

// ARGV[9] of a decide call, or nothing if `args` is too short.
std::string_view description_of(const std::vector<std::string>& args) {
  return args.size() > 8 ? std::string_view(args[8]) : std::string_view{};
}

// `items[first..]` is the reply {verdict, denied, metric, c, count, amount, ...};
// `args` are the lines of the call's description (ARGV[9]).
Decision decode_fresh(const std::vector<Reply>& items, std::size_t first,
                      const std::vector<std::string_view>& args, std::string_view transaction_id,
                      std::int64_t requested_amount) {
  const auto bad = [&](const char* what) {
    return Error(errc::protocol_error,
                 "limit reply for transaction " + std::string(transaction_id) + ": " + what,
                 Outcome::unknown);
  };
  const auto item = [&](std::size_t i) -> const Reply& {
    if (first + i >= items.size()) {
      throw bad("too short");
    }
    return items[first + i];
  };
  const auto arg = [&](std::size_t i) -> std::string_view {
    if (i >= args.size()) {
      throw bad("arguments too short");
    }
    return args[i];
  };
  const auto number = [&](std::string_view text) {
    return Reply::string(std::string(text)).to_int64();
  };
  Decision decision;
  const std::string& verdict = item(0).as_string();
  decision.dry_run = verdict == "would_allow" || verdict == "would_deny";
  const bool allowed = verdict == "allowed" || verdict == "would_allow";
  if (!allowed && verdict != "denied" && verdict != "would_deny") {
    throw bad("unknown verdict");
  }
  decision.verdict = allowed ? Decision::Verdict::allowed : Decision::Verdict::denied;
  const std::int64_t denied_rule = item(1).to_int64();
  const std::string& metric = item(2).as_string();
  const auto counters = static_cast<std::size_t>(item(3).to_int64());
  const auto rule_count = static_cast<std::size_t>(number(arg(5 * counters)));
  for (std::size_t i = 0; i < rule_count; ++i) {
    const std::size_t at = 5 * counters + 1 + 4 * i;
    const auto counter = static_cast<std::size_t>(number(arg(at + 1)));
    if (counter == 0) { // a per-transaction rule: no counter, no window
      if (static_cast<std::int64_t>(i) + 1 == denied_rule) {
        decision.denial = Denial{std::string(arg(at)), Metric::single_amount, number(arg(at + 3)),
                                 0, requested_amount};
      }
      continue;
    }
    if (counter > counters) {
      throw bad("a rule names no counter");
    }
    const std::size_t c = 5 * (counter - 1);
    RuleStatus status;
    status.rule = std::string(arg(at));
    status.period = parse_period(arg(c + 1));
    status.window_id = std::string(arg(c + 2));
    status.resets_at = TimePoint{std::chrono::milliseconds{number(arg(c + 3))}};
    const std::int64_t max_count = number(arg(at + 2));
    const std::int64_t max_amount = number(arg(at + 3));
    status.max_count = max_count < 0 ? std::nullopt : std::optional<std::int64_t>(max_count);
    status.max_amount = max_amount < 0 ? std::nullopt : std::optional<std::int64_t>(max_amount);
    status.used = {item(2 + 2 * counter).to_int64(), item(3 + 2 * counter).to_int64()};
    if (static_cast<std::int64_t>(i) + 1 == denied_rule) {
      const bool by_count = metric == "count";
      decision.denial = Denial{
          status.rule, by_count ? Metric::count : Metric::amount, by_count ? max_count : max_amount,
          by_count ? status.used.count : status.used.amount, by_count ? 1 : requested_amount};
    }
    decision.rules.push_back(std::move(status));
  }
  if (!allowed && !decision.denial) {
    throw bad("a denial names no rule");
  }
  return decision;
}

} // namespace

std::string fingerprint(std::string_view op, const Transaction& transaction) {
  std::string text(op);
  text += '|';
  text += std::to_string(transaction.amount);
  for (const auto& [attribute, value] : transaction.attributes) {
    text.append(1, '|').append(attribute).append(1, '=').append(value);
  }
  return text;
}

LimitCall build_decide(std::string_view op, const Transaction& transaction,
                       const std::vector<const Rule*>& per_transaction_rules,
                       const std::vector<const Rule*>& window_rules, const DecideContext& context) {
  struct Counter {
    std::string key;
    std::string field;
    Period period;
    const Window* window;
  };
  // One window per period at most: computed once, shared by the rules of that period.
  std::array<std::optional<Window>, 6> windows;
  std::vector<Counter> counters;
  std::vector<std::string> holds;
  std::vector<std::size_t> counter_of_rule;
  TimePoint record_expiry = context.now + context.record_min_ttl;

  for (const Rule* rule : window_rules) {
    const Period period = *rule->period();
    auto& window = windows[static_cast<std::size_t>(period)];
    const std::string counter_name = rule->counter_name();
    if (!window) {
      window = context.calendar->window(period, transaction.time);
      check_window_open(counter_name, period, *window, context.window_grace, context.now);
      record_expiry = std::max(record_expiry, window->end + context.window_grace);
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

  const TimePoint hold_expiry = context.now + context.reservation_timeout;
  record_expiry = std::max(record_expiry, hold_expiry);

  LimitCall call;
  call.keys.reserve(1 + holds.size() + counters.size());
  call.keys.push_back(context.record_key != nullptr ? *context.record_key
                                                    : context.keys->transaction(transaction.id));
  call.keys.insert(call.keys.end(), holds.begin(), holds.end());
  // ARGV[9], the description the record keeps for replays and refunds, one line per value;
  // then what the script decides with: the same values again, without those it only stores.
  const std::size_t rule_count = per_transaction_rules.size() + window_rules.size();
  call.args.reserve(10 + 2 * counters.size() + 3 * rule_count);
  call.args = {std::string(op),
               fingerprint(op, transaction),
               std::to_string(transaction.amount),
               std::to_string(unix_millis(context.now)),
               std::to_string(unix_millis(record_expiry)),
               std::to_string(unix_millis(hold_expiry)),
               std::to_string(holds.size()),
               std::to_string(counters.size()),
               std::string()};
  std::string description;
  description.reserve(32 * counters.size() + 24 * rule_count);
  const auto line = [&description](std::string_view value) {
    if (!description.empty()) {
      description += '\n';
    }
    description += value;
  };
  // Appends `value` to both: the description and the script's own arguments.
  const auto both = [&](std::string value) {
    line(value);
    call.args.push_back(std::move(value));
  };
  for (const auto& counter : counters) {
    call.keys.push_back(counter.key); // one key per counter: a shape and a period make a key
    both(counter.field);
    line(to_string(counter.period));
    line(counter.window->id);
    line(std::to_string(unix_millis(counter.window->end)));
    both(std::to_string(unix_millis(counter.window->end + context.window_grace)));
  }
  both(std::to_string(rule_count));
  for (const Rule* rule : per_transaction_rules) {
    line(rule->name());
    both("0"); // no counter: the transaction's own amount
    both("-1");
    both(limit_arg(rule->max_amount()));
  }
  for (std::size_t i = 0; i < window_rules.size(); ++i) {
    line(window_rules[i]->name());
    both(std::to_string(counter_of_rule[i] + 1));
    both(limit_arg(window_rules[i]->max_count()));
    both(limit_arg(window_rules[i]->max_amount()));
  }
  call.args[8] = std::move(description);
  return call;
}

Decision decode_decision(const Reply& reply, const std::vector<std::string>& call_args,
                         std::string_view transaction_id, std::int64_t requested_amount) {
  const auto& items = reply.as_array();
  if (items.empty()) {
    throw Error(errc::protocol_error, "empty limit reply", Outcome::unknown);
  }
  const std::string& head = items[0].as_string();
  if (head == "conflict") {
    throw reused_id(transaction_id);
  }
  if (head == "overflow") {
    const auto counter = static_cast<std::size_t>(reply.at(1).to_int64());
    const auto description = split_lines(description_of(call_args));
    const std::size_t at = 5 * (counter - 1);
    if (counter < 1 || at + 1 >= description.size()) {
      throw Error(errc::protocol_error,
                  "limit reply for transaction " + std::string(transaction_id) +
                      ": an overflow names no counter",
                  Outcome::unknown);
    }
    throw Error(errc::precision_overflow,
                "transaction " + std::string(transaction_id) + " would take the " +
                    std::string(description[at + 1]) + " total of " + std::string(description[at]) +
                    " past 2^53 - 1; nothing was written",
                Outcome::failed);
  }
  if (head == "cancelled") {
    Decision decision;
    decision.verdict = Decision::Verdict::cancelled;
    decision.replayed = true;
    decision.state = "cancelled";
    return decision;
  }
  if (head == "replay") {
    // The first call's description comes back with it: the rules may have changed since.
    const std::vector<std::string_view> first_args = split_lines(reply.at(2).as_string());
    Decision decision = decode_fresh(items, 3, first_args, transaction_id, requested_amount);
    decision.replayed = true;
    decision.state = reply.at(1).as_string();
    return decision;
  }
  return decode_fresh(items, 0, split_lines(description_of(call_args)), transaction_id,
                      requested_amount);
}

namespace {

constexpr std::array<Metric, 4> metrics{Metric::count, Metric::amount, Metric::single_amount,
                                        Metric::unavailable};

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
  const std::vector<std::string_view> lines = split_lines(text);
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
