#include "limit_counter/limit_codec.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <functional>
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

// Appends `value` in decimal, without a string of its own.
void append_number(std::string& text, std::int64_t value) {
  char digits[24];
  const auto end = std::to_chars(std::begin(digits), std::end(digits), value).ptr;
  text.append(digits, static_cast<std::size_t>(end - digits));
}

std::string number_arg(std::int64_t value) {
  if (value >= 0 && value <= 9) { // counter numbers and counts: most numbers of a call
    return std::string(1, static_cast<char>('0' + value));
  }
  char digits[24];
  return std::string(digits, std::to_chars(std::begin(digits), std::end(digits), value).ptr);
}

// The key expiry `expiry` (ms) as sent: the same for every call until the window ends, so
// kept per thread and period. Keyed by the value itself, it never answers for another one.
const std::string& key_expiry_arg(Period period, std::int64_t expiry) {
  struct Cached {
    std::int64_t expiry = -1;
    std::string text;
  };
  thread_local std::array<Cached, 6> cached;
  Cached& entry = cached[static_cast<std::size_t>(period)];
  if (entry.expiry != expiry) {
    entry.text = number_arg(expiry);
    entry.expiry = expiry;
  }
  return entry.text;
}

std::string limit_arg(std::optional<std::int64_t> limit) {
  return limit ? number_arg(*limit) : std::string("-1");
}

// `stable_hash` (FNV-1a 64) fed piece by piece (no string of the whole is built), as base64url
// digits (6 bits each, the lowest bits of the hash): records keep two digests each, and every
// byte of a record counts.
class Digest {
public:
  void add(std::string_view text) noexcept { hash_ = stable_hash(text, hash_); }
  std::string text(std::size_t digits) const {
    static constexpr char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    std::string text(digits, 'A');
    for (std::size_t i = 0; i < digits; ++i) {
      text[digits - 1 - i] = alphabet[(hash_ >> (6 * i)) & 0x3F];
    }
    return text;
  }

private:
  std::uint64_t hash_ = stable_hash({});
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
  std::vector<RuleArgs> own_args;        // without context.rule_args: built for this call
  std::vector<std::string> bucket_holds; // with several buckets: the holds keys built here
  std::vector<std::string_view> holds;   // into the rule args or bucket_holds
  struct Use {
    std::size_t counter; // its counter's index
    const RuleArgs* args;
  };
  std::vector<Use> uses;                  // per window rule
  std::vector<std::string_view> fields;   // each distinct field once, into `counters`
  std::vector<std::size_t> field_numbers; // per counter: its field's number (1..) in `fields`
  std::string fields_word;                // `fields` ':'-joined, as a record keeps them
  std::string text;                       // the counter set's text (lua/limit.lua)
  std::string name;                       // its digest

  CounterPlan(const Transaction& transaction, const std::vector<const Rule*>& window_rules,
              const DecideContext& context) {
    const std::size_t n = window_rules.size();
    counters.reserve(n);
    uses.reserve(n);
    holds.reserve(n);
    if (context.keys->buckets() != 1) {
      bucket_holds.reserve(n); // never reallocated: `holds` views its strings
    }
    std::size_t text_size = 4;
    for (const Rule* rule : window_rules) {
      const RuleArgs* args = context.rule_args != nullptr ? context.rule_args->find(rule) : nullptr;
      if (args == nullptr) {
        own_args.reserve(n); // never reallocated: `uses` point at its elements
        args = &own_args.emplace_back(rule_args(*rule, *context.keys));
      }
      const Period period = *rule->period();
      auto& window = windows[static_cast<std::size_t>(period)];
      if (!window) {
        window = context.calendar->window(period, transaction.time);
        if (context.refuse_closed_windows) {
          check_window_open(args->counter_name, period, *window, context.window_grace, context.now);
        }
      }
      std::string field = dimension_field(*rule, transaction);
      std::string key;
      std::string_view hold = args->holds;
      if (!args->window_key_head.empty()) {
        const std::string_view period_name = to_string(period);
        key.reserve(args->window_key_head.size() + period_name.size() + 1 + window->id.size());
        key.append(args->window_key_head).append(period_name).push_back(':');
        key.append(window->id);
      } else {
        const std::string tag = context.keys->tag(args->counter_name, field);
        key = context.keys->window(tag, period, window->id);
        hold = bucket_holds.emplace_back(context.keys->holds(tag));
      }
      const auto same = std::find_if(counters.begin(), counters.end(), [&](const Counter& c) {
        return c.key == key && c.field == field;
      });
      uses.push_back({static_cast<std::size_t>(same - counters.begin()), args});
      if (same == counters.end()) {
        text_size += key.size() + 4;
        counters.push_back({std::move(key), std::move(field), period, &*window});
      }
      if (std::find(holds.begin(), holds.end(), hold) == holds.end()) {
        text_size += hold.size() + 1;
        holds.push_back(hold);
      }
    }
    // (after the last push_back: `fields` views the counters' strings)
    fields.reserve(counters.size());
    field_numbers.reserve(counters.size());
    for (const auto& counter : counters) {
      auto same = std::find(fields.begin(), fields.end(), counter.field);
      if (same == fields.end()) {
        fields_word.append(fields.empty() ? "" : ":").append(counter.field);
        same = fields.insert(fields.end(), counter.field);
      }
      field_numbers.push_back(static_cast<std::size_t>(same - fields.begin()) + 1);
    }
    text.reserve(text_size);
    append_number(text, static_cast<std::int64_t>(counters.size()));
    for (std::size_t j = 0; j < counters.size(); ++j) {
      text.push_back('\n');
      text.append(counters[j].key).push_back(' ');
      append_number(text, static_cast<std::int64_t>(field_numbers[j]));
    }
    for (const auto hold : holds) {
      text.push_back('\n');
      text.append(hold);
    }
    // 48 bits: few distinct sets (one per rules, windows and buckets), and a collision is
    // resolved by the script (keep_counter_set's suffixes), never silent
    Digest digest;
    digest.add(text);
    name = digest.text(8);
  }
};

std::string record_key_of(const Transaction& transaction, const DecideContext& context) {
  return context.record_key != nullptr ? *context.record_key
                                       : context.keys->transaction(transaction.id);
}

} // namespace

RuleArgs rule_args(const Rule& rule, const CounterKeys& keys) {
  RuleArgs args;
  args.counter_name = rule.counter_name();
  args.count_limit = limit_arg(rule.max_count());
  args.amount_limit = limit_arg(rule.max_amount());
  if (keys.buckets() == 1) {
    const std::string tag = keys.bucket_tag(args.counter_name, 0);
    // `<prefix>{<tag>}:day:` less its period: what every period's window key begins with
    args.window_key_head = keys.window(tag, Period::day, "");
    args.window_key_head.resize(args.window_key_head.size() - to_string(Period::day).size() - 1);
    args.holds = keys.holds(tag);
  }
  return args;
}

RuleSetArgs::RuleSetArgs(const RuleSet& rules, const CounterKeys& keys) : rules_(&rules.rules()) {
  args_.reserve(rules_->size());
  for (const Rule& rule : *rules_) {
    args_.push_back(rule_args(rule, keys));
  }
}

const RuleArgs* RuleSetArgs::find(const Rule* rule) const noexcept {
  const std::less<const Rule*> before;
  const Rule* first = rules_->data();
  if (rules_->size() != args_.size() || before(rule, first) ||
      !before(rule, first + rules_->size())) {
    return nullptr;
  }
  return &args_[static_cast<std::size_t>(rule - first)];
}

std::string fingerprint(std::string_view op, const Transaction& transaction) {
  // Each part with its length, so that no split of the same characters into other attributes
  // or values gives the same text.
  Digest digest;
  const auto part = [&digest](std::string_view text) {
    char digits[24];
    const auto end = std::to_chars(std::begin(digits), std::end(digits), text.size()).ptr;
    digest.add(std::string_view(digits, static_cast<std::size_t>(end - digits)));
    digest.add(":");
    digest.add(text);
  };
  part(op);
  for (const auto& [attribute, value] : transaction.attributes) {
    part(attribute);
    part(value);
  }
  return digest.text(11); // all 64 bits: a retry is told from another use of its id by this
}

std::string counter_set_key(std::string_view record_key, std::string_view name) {
  std::string key;
  key.reserve(record_key.size() + name.size() + 4);
  if (!record_key.empty() && record_key.back() == '}') { // <prefix>tx:{<id>}
    key.append(record_key.substr(0, record_key.find('{') - 3)).append("cs:");
  } else { // <prefix>{<tag>}:tx:<id>
    key.append(record_key.substr(0, record_key.find('}') + 1)).append(":cs:");
  }
  return key.append(name);
}

LimitCall build_decide(std::string_view op, const Transaction& transaction,
                       const std::vector<const Rule*>& per_transaction_rules,
                       const std::vector<const Rule*>& window_rules, const DecideContext& context) {
  CounterPlan plan(transaction, window_rules, context);
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
  call.keys.push_back(std::move(record));
  // Without counters the script never touches a counter set: the record's own key stands in,
  // so that a cluster's home key (a transaction without window rules) names one slot.
  call.keys.push_back(plan.counters.empty() ? call.keys.front()
                                            : counter_set_key(call.keys.front(), plan.name));
  const std::size_t rule_count = per_transaction_rules.size() + window_rules.size();
  std::string names;
  std::size_t names_size = rule_count;
  for (const Rule* rule : per_transaction_rules) {
    names_size += rule->name().size();
  }
  for (const Rule* rule : window_rules) {
    names_size += rule->name().size();
  }
  names.reserve(names_size);
  call.shape.rules.reserve(rule_count);
  const auto add_name = [&names](const Rule* rule) {
    if (!names.empty()) {
      names.push_back(' ');
    }
    names.append(rule->name());
  };
  for (const Rule* rule : per_transaction_rules) {
    add_name(rule);
    call.shape.rules.push_back({rule, 0});
  }
  for (std::size_t i = 0; i < window_rules.size(); ++i) {
    add_name(window_rules[i]);
    call.shape.rules.push_back({window_rules[i], plan.uses[i].counter + 1});
  }
  call.args.reserve(18 + 3 * rule_count + 2 * plan.counters.size());
  call.args.emplace_back(op);
  call.args.emplace_back("1");
  call.args.push_back(number_arg(unix_millis(context.now)));
  call.args.push_back(number_arg(unix_millis(record_expiry)));
  call.args.push_back(number_arg(unix_millis(hold_expiry)));
  call.args.emplace_back("1");
  // the program: the rules this transaction matched, its windows' key expiries
  call.args.push_back(number_arg(static_cast<std::int64_t>(plan.holds.size())));
  call.args.push_back(number_arg(static_cast<std::int64_t>(plan.counters.size())));
  for (const auto& counter : plan.counters) {
    call.args.push_back(
        key_expiry_arg(counter.period, unix_millis(counter.window->end + context.window_grace)));
  }
  call.args.push_back(std::move(names));
  call.args.push_back(number_arg(static_cast<std::int64_t>(rule_count)));
  for (const Rule* rule : per_transaction_rules) {
    call.args.emplace_back("0");
    call.args.emplace_back("-1");
    call.args.push_back(limit_arg(rule->max_amount()));
  }
  for (std::size_t i = 0; i < window_rules.size(); ++i) {
    const RuleArgs& args = *plan.uses[i].args;
    call.args.push_back(number_arg(static_cast<std::int64_t>(plan.uses[i].counter + 1)));
    call.args.push_back(args.count_limit);
    call.args.push_back(args.amount_limit);
  }
  // the counter set: what this transaction moves
  call.args.emplace_back("1");
  call.args.emplace_back("1");
  call.args.push_back(records ? std::move(plan.name) : std::string());
  // (a check keeps no set, but the script finds the hold sets in its text)
  call.args.push_back(std::move(plan.text));
  call.shape.counters.reserve(plan.counters.size());
  for (std::size_t j = 0; j < plan.counters.size(); ++j) {
    // one key per counter: a shape and a period make a key
    auto& counter = plan.counters[j];
    call.shape.counters.push_back({counter.period, counter.window->id, counter.window->end});
    call.keys.push_back(std::move(counter.key));
    call.args.push_back(number_arg(static_cast<std::int64_t>(plan.field_numbers[j])));
  }
  // the transaction
  call.args.emplace_back("1");
  call.args.push_back(fingerprint(op, transaction));
  call.args.push_back(number_arg(transaction.amount));
  call.args.push_back(std::move(plan.fields_word));
  return call;
}

namespace {

// Where the parts of a single decide call (build_decide) start: its program (h, c, c key
// expiries, names, r, the rules), its counter set (after S: program number, name, text, c
// field numbers) and its transaction (counter set number, fingerprint, amount, fields).
struct DecideLayout {
  static constexpr std::size_t program = 6;
  std::size_t counters = 0;
  std::size_t set = 0;
  std::size_t transaction = 0;

  explicit DecideLayout(const std::vector<std::string>& args)
      : counters(std::stoul(args.at(program + 1))),
        set(program + 4 + counters + 3 * std::stoul(args.at(program + 3 + counters)) + 1),
        transaction(set + 3 + counters) {}
};

} // namespace

const std::string& decide_fingerprint(const std::vector<std::string>& args) {
  return args.at(DecideLayout(args).transaction + 1);
}

const std::string& decide_amount(const std::vector<std::string>& args) {
  return args.at(DecideLayout(args).transaction + 2);
}

const std::string& decide_record_expiry(const std::vector<std::string>& args) { return args.at(3); }

void DecideBatch::add(std::vector<std::string>&& keys, std::vector<std::string>&& args) {
  const DecideLayout at(args);
  if (size_ == 0) {
    header_.assign(std::make_move_iterator(args.begin() + 2),
                   std::make_move_iterator(args.begin() + DecideLayout::program - 1));
  }
  const auto begin = [&args](std::size_t i) {
    return args.begin() + static_cast<std::ptrdiff_t>(i);
  };
  // Transactions that matched the same rules share one program ...
  std::size_t program = 0;
  while (program < programs_.size() &&
         !std::equal(programs_[program].begin(), programs_[program].end(),
                     begin(DecideLayout::program), begin(at.set - 1))) {
    ++program;
  }
  if (program == programs_.size()) {
    programs_.emplace_back(std::make_move_iterator(begin(DecideLayout::program)),
                           std::make_move_iterator(begin(at.set - 1)));
  }
  // ... and those that move the same counters (under the same program) one counter set: its
  // text names every counter's key and field, its name is the text's digest.
  const std::string& name = args[at.set + 1];
  const std::string& text = args[at.set + 2];
  std::size_t set = 0;
  while (set < sets_.size() &&
         !(sets_[set].program == program && sets_[set].name == name && sets_[set].text == text)) {
    ++set;
  }
  if (set == sets_.size()) {
    CounterSet& added = sets_.emplace_back();
    added.program = program;
    added.name = std::move(args[at.set + 1]);
    added.text = std::move(args[at.set + 2]);
    added.field_numbers.assign(std::make_move_iterator(begin(at.set + 3)),
                               std::make_move_iterator(begin(at.transaction)));
    // KEYS: the record, then the set's key and its counters' keys
    added.keys.assign(std::make_move_iterator(keys.begin() + 1),
                      std::make_move_iterator(keys.end()));
  }
  transactions_.push_back(std::to_string(set + 1));
  transactions_.push_back(std::move(args[at.transaction + 1]));
  transactions_.push_back(std::move(args[at.transaction + 2]));
  transactions_.push_back(std::move(args[at.transaction + 3]));
  records_.push_back(std::move(keys.front()));
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
  args.push_back(std::to_string(sets_.size()));
  std::vector<std::string> keys = std::move(records_);
  for (auto& set : sets_) {
    args.push_back(std::to_string(set.program + 1));
    args.push_back(std::move(set.name));
    args.push_back(std::move(set.text));
    args.insert(args.end(), std::make_move_iterator(set.field_numbers.begin()),
                std::make_move_iterator(set.field_numbers.end()));
    keys.insert(keys.end(), std::make_move_iterator(set.keys.begin()),
                std::make_move_iterator(set.keys.end()));
  }
  args.insert(args.end(), std::make_move_iterator(transactions_.begin()),
              std::make_move_iterator(transactions_.end()));
  *this = DecideBatch();
  return {std::move(keys), std::move(args)};
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
  args.push_back(plan.fields_word);
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
  // (views: each comparison with a verdict's name is a length check first, inline)
  const std::string_view head = items[0].as_string();
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
  const std::string_view metric = replay ? std::string_view() : reply.at(2).as_string();
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
    status.used = {items[2 + 2 * counter].to_int64(), items[3 + 2 * counter].to_int64()};
    if (denier) {
      const bool by_count = metric == "count";
      decision.denial = Denial{status.rule, by_count ? Metric::count : Metric::amount,
                               by_count ? *status.max_count : *status.max_amount,
                               by_count ? status.used.count : status.used.amount,
                               by_count ? 1 : requested_amount};
    }
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
