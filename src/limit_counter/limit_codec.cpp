#include "limit_counter/limit_codec.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <functional>
#include <iterator>
#include <optional>

#include <limitcounter/error.hpp>

#include "limit_counter/rule_matching.hpp"
#include "limit_counter/window_closed.hpp"
#include "shared/amount.hpp"
#include "shared/msgpack.hpp"

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
  char digits[24];
  return std::string(digits, std::to_chars(std::begin(digits), std::end(digits), value).ptr);
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

// Where the parts of a single decide call (build_decide) are: its header (op, n, now, record
// expiry, hold expiry, P), its program (numbers, names), S, its counter set (program number,
// name, text) and its transaction (fingerprint, amount, fields: with one set, no set number).
struct DecideLayout {
  static constexpr std::size_t program = 6;
  static constexpr std::size_t set = 9;
  static constexpr std::size_t transaction = 12;
};

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

// What a decide call takes from its rules and windows: everything but the transaction's own
// values (id, fingerprint, amount, dimension values) and the call's times. With one bucket the
// counters' keys do not depend on the dimension values either, so a template is kept per thread
// and reused while a host decides transactions under the same rules in the same windows.
struct CallTemplate {
  // What it was built for (what a reuse compares).
  std::uint64_t rule_set_id = 0; // RuleSetArgs::id(); 0: built for one call only
  const CounterKeys* keys = nullptr;
  std::chrono::milliseconds grace{0};
  std::vector<const Rule*> per_transaction_rules;
  std::vector<const Rule*> window_rules;
  std::vector<TimePoint> window_ends; // per window rule

  // What a call copies.
  std::string program; // MessagePack: h, c, c key expiries, c field numbers, r, 3r rule args
  std::string names;   // the rules' names
  std::vector<std::string> counter_keys;  // per counter
  std::vector<std::string> hold_keys;     // per counter: its window's hold set
  std::vector<std::size_t> field_numbers; // per counter: its field's number among the fields
  std::vector<const Rule*> field_rules;   // per field: a rule that counts by it
  std::string text;                       // the counter set's text (lua/limit.lua)
  std::string name;                       // its digest
  std::string set_key;                    // its key, in the slot of the record it was built for
  DecideShape shape;

  bool fits(const std::vector<const Rule*>& per_transaction, const std::vector<const Rule*>& window,
            const std::vector<TimePoint>& ends, const DecideContext& context) const {
    return rule_set_id != 0 && rule_set_id == context.rule_args->id() && keys == context.keys &&
           grace == context.window_grace && per_transaction_rules == per_transaction &&
           window_rules == window && window_ends == ends;
  }

  CallTemplate(const Transaction& transaction, const std::vector<const Rule*>& per_transaction,
               const std::vector<const Rule*>& window, const std::vector<Window>& windows,
               const std::string& record_key, const DecideContext& context)
      : keys(context.keys), grace(context.window_grace), per_transaction_rules(per_transaction),
        window_rules(window) {
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
    for (const Window* in : counter_windows) {
      append_msgpack_int(program, unix_millis(in->end + context.window_grace));
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

  // The transaction's distinct fields, ':'-joined, as its record keeps them.
  std::string fields_word(const Transaction& transaction) const {
    std::string word;
    for (const Rule* rule : field_rules) {
      if (!word.empty()) {
        word.push_back(':');
      }
      append_field(word, *rule, transaction);
    }
    return word;
  }
};

// The windows of the window rules at the transaction's time, one per rule (computed once per
// period), each checked open unless the context says otherwise.
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

std::string record_key_of(const Transaction& transaction, const DecideContext& context) {
  return context.record_key != nullptr ? *context.record_key
                                       : context.keys->transaction(transaction.id);
}

} // namespace

namespace {

std::uint64_t next_rule_set_args_id() {
  static std::atomic<std::uint64_t> last{0};
  return ++last;
}

} // namespace

RuleArgs rule_args(const Rule& rule, const CounterKeys& keys) {
  RuleArgs args;
  args.counter_name = rule.counter_name();
  if (keys.buckets() == 1) {
    const std::string tag = keys.bucket_tag(args.counter_name, 0);
    // `<prefix>{<tag>}:day:` less its period: what every period's window key begins with
    args.window_key_head = keys.window(tag, Period::day, "");
    args.window_key_head.resize(args.window_key_head.size() - to_string(Period::day).size() - 1);
  }
  return args;
}

RuleSetArgs::RuleSetArgs(const RuleSet& rules, const CounterKeys& keys)
    : id_(next_rule_set_args_id()), rules_(&rules.rules()) {
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

std::string fingerprint(LimitOp op, const Transaction& transaction) {
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
  part(to_string(op));
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

namespace {

// The template of a call for these rules and windows: the thread's if it has one that fits
// (one bucket, a standalone record, the rule set's args), else one built for `call_template`'s
// caller alone in `own`.
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

} // namespace

LimitCall build_decide(LimitOp op, const Transaction& transaction,
                       const std::vector<const Rule*>& per_transaction_rules,
                       const std::vector<const Rule*>& window_rules, const DecideContext& context) {
  LimitCall call;
  // room for the hold sets too (at most one counter and one hold set a window rule): growing
  // for them moved every key again, ~440 instructions of a 4-rule consume
  call.keys.reserve(2 + 2 * window_rules.size());
  call.keys.push_back(record_key_of(transaction, context));
  std::optional<CallTemplate> own;
  const CallTemplate& shared = call_template(transaction, per_transaction_rules, window_rules,
                                             call.keys.front(), context, own);
  const TimePoint hold_expiry = context.now + context.reservation_timeout;
  // The replay horizon, whatever the windows (a reservation's hold outlives its record in the
  // hold sets, whose members say what to release); never shorter than a hold.
  const TimePoint record_expiry = std::max(context.now + context.replay_horizon, hold_expiry);
  // Without counters the call's own record stands in for the set (see CallTemplate): not the
  // record of the transaction the template was built for, which is in another slot of a cluster.
  call.keys.push_back(shared.counter_keys.empty() ? call.keys.front() : shared.set_key);
  call.keys.insert(call.keys.end(), shared.counter_keys.begin(), shared.counter_keys.end());
  call.keys.insert(call.keys.end(), shared.hold_keys.begin(), shared.hold_keys.end());

  call.args.reserve(DecideLayout::transaction + 3);
  call.args.emplace_back(to_string(op));
  call.args.emplace_back("1");
  call.args.push_back(number_arg(unix_millis(context.now)));
  call.args.push_back(number_arg(unix_millis(record_expiry)));
  call.args.push_back(number_arg(unix_millis(hold_expiry)));
  // the program: the rules this transaction matched, its windows' key expiries
  call.args.emplace_back("1");
  call.args.push_back(shared.program);
  call.args.push_back(shared.names);
  // the counter set: which counters it moves (a check keeps no set, but the script finds the
  // hold sets in its text)
  call.args.emplace_back("1");
  call.args.emplace_back("1");
  call.args.push_back(op != LimitOp::check ? shared.name : std::string());
  call.args.push_back(shared.text);
  // the transaction
  call.args.push_back(fingerprint(op, transaction));
  call.args.push_back(number_arg(transaction.amount));
  call.args.push_back(shared.fields_word(transaction));
  call.shape = shared.shape;
  return call;
}

const std::string& decide_fingerprint(const std::vector<std::string>& args) {
  return args.at(DecideLayout::transaction);
}

const std::string& decide_amount(const std::vector<std::string>& args) {
  return args.at(DecideLayout::transaction + 1);
}

const std::string& decide_record_expiry(const std::vector<std::string>& args) { return args.at(3); }

void DecideBatch::add(std::vector<std::string>&& keys, std::vector<std::string>&& args) {
  using at = DecideLayout;
  // The header (now, record expiry, hold expiry) of the latest call: a consume queued behind
  // others is decided at its own time or later, never at an older caller's (a hold that expired
  // before it was made must not deny it; its record keeps at least its own replay horizon).
  const auto later = [](const std::string& a, const std::string& b) { // decimal, no sign
    return a.size() != b.size() ? a.size() > b.size() : a > b;
  };
  if (size_ == 0 || later(args[2], header_[0])) {
    header_.assign(std::make_move_iterator(args.begin() + 2),
                   std::make_move_iterator(args.begin() + at::program - 1));
  }
  // Transactions that matched the same rules share one program ...
  std::size_t program = 0;
  while (program < programs_.size() && !(programs_[program].first == args[at::program] &&
                                         programs_[program].second == args[at::program + 1])) {
    ++program;
  }
  if (program == programs_.size()) {
    programs_.emplace_back(std::move(args[at::program]), std::move(args[at::program + 1]));
  }
  // ... and those that move the same counters one counter set: its text names every
  // counter's key, its name is the text's digest.
  const std::string& name = args[at::set + 1];
  const std::string& text = args[at::set + 2];
  std::size_t set = 0;
  while (set < sets_.size() &&
         !(sets_[set].program == program && sets_[set].name == name && sets_[set].text == text)) {
    ++set;
  }
  if (set == sets_.size()) {
    CounterSet& added = sets_.emplace_back();
    added.program = program;
    added.name = std::move(args[at::set + 1]);
    added.text = std::move(args[at::set + 2]);
    // KEYS: the record, then the set's key, its counters' keys and its hold sets
    added.keys.assign(std::make_move_iterator(keys.begin() + 1),
                      std::make_move_iterator(keys.end()));
  }
  transaction_sets_.push_back(set);
  for (std::size_t i = 0; i < 3; ++i) { // fingerprint, amount, fields
    transactions_.push_back(std::move(args[at::transaction + i]));
  }
  records_.push_back(std::move(keys.front()));
  ++size_;
}

std::pair<std::vector<std::string>, std::vector<std::string>> DecideBatch::take() {
  std::vector<std::string> args{"batch", std::to_string(size_)};
  args.insert(args.end(), header_.begin(), header_.end());
  args.push_back(std::to_string(programs_.size()));
  for (auto& [numbers, names] : programs_) {
    args.push_back(std::move(numbers));
    args.push_back(std::move(names));
  }
  args.push_back(std::to_string(sets_.size()));
  std::vector<std::string> keys = std::move(records_);
  for (auto& set : sets_) {
    args.push_back(std::to_string(set.program + 1));
    args.push_back(std::move(set.name));
    args.push_back(std::move(set.text));
    keys.insert(keys.end(), std::make_move_iterator(set.keys.begin()),
                std::make_move_iterator(set.keys.end()));
  }
  // The transactions' values as one MessagePack array of strings: one argument instead of 3 (or
  // 4) per transaction, each of which Redis would parse and make an object of (~1,000 of its
  // instructions per transaction, measured; docs/BENCHMARKS.md).
  const bool several_sets = sets_.size() > 1;
  // (a string's head takes 1 byte up to 31 characters, 2 up to 255; a longer one may regrow it)
  std::size_t bytes = 5 + (several_sets ? 2 * size_ : 0);
  for (const std::string& value : transactions_) {
    bytes += 2 + value.size();
  }
  std::string packed;
  packed.reserve(bytes);
  append_msgpack_array(packed, transactions_.size() + (several_sets ? size_ : 0));
  for (std::size_t i = 0; i < size_; ++i) {
    if (several_sets) {
      append_msgpack_string(packed, std::to_string(transaction_sets_[i] + 1));
    }
    for (std::size_t j = 3 * i; j < 3 * i + 3; ++j) {
      append_msgpack_string(packed, transactions_[j]);
    }
  }
  args.push_back(std::move(packed));
  *this = DecideBatch();
  return {std::move(keys), std::move(args)};
}

std::string append_original(std::vector<std::string>& args, const Transaction& original,
                            const std::vector<const Rule*>& window_rules,
                            const DecideContext& context) {
  const std::string record = record_key_of(original, context);
  const CallTemplate plan(original, {}, window_rules, windows_of(original, window_rules, context),
                          record, context);
  const bool any = !plan.counter_keys.empty();
  args.push_back(fingerprint(LimitOp::consume, original));
  args.push_back(std::to_string(original.amount));
  args.push_back(any ? plan.name : std::string());
  args.push_back(any ? plan.text : std::string());
  args.push_back(std::to_string(unix_millis(context.now + context.replay_horizon)));
  args.push_back(fingerprint(LimitOp::reserve, original));
  args.push_back(plan.fields_word(original));
  return plan.set_key;
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
    decision.state = "cancelled";
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
    decision.state = items[extras].as_string();
    if (decision.state == "denied") {
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

std::string encode_stored_decision(const Decision& decision) {
  if (!decision.denial) {
    return {};
  }
  const Denial& denial = *decision.denial;
  std::string text = denial.rule;
  text.append(1, ' ')
      .append(to_string(denial.metric))
      .append(1, ' ')
      .append(std::to_string(denial.limit))
      .append(1, ' ')
      .append(std::to_string(denial.used));
  return text;
}

std::optional<ConfirmResult> decode_confirm(const Reply& reply) {
  const std::string& status = reply.at(0).as_string();
  ConfirmResult result;
  if (status == "confirmed") { // {"confirmed", final, released, ...}
    result.amount = reply.at(1).to_int64();
    result.released = reply.at(2).to_int64();
  } else if (status == "already") { // {"already", "confirmed", final, ...}
    result.replayed = true;
    result.amount = reply.at(2).to_int64();
  } else {
    return std::nullopt;
  }
  return result;
}

std::optional<CancelResult> decode_cancel(const Reply& reply, std::string_view transaction_id) {
  const std::string& status = reply.at(0).as_string();
  CancelResult result;
  if (status == "tombstone") {
    result.status = CancelResult::Status::recorded_unknown;
  } else if (status == "expired") { // (a cluster's home record: its hold had run out)
    result.status = CancelResult::Status::expired;
  } else if (status == "already") {
    const std::string& state = reply.at(1).as_string();
    if (state == "expired") {
      result.status = CancelResult::Status::expired;
    } else if (state == "cancelled" || state == "voided") {
      result.replayed = true;
    } else {
      throw Error(errc::protocol_error,
                  "cancel of " + quoted_id(transaction_id) + ": ended in unexpected state " +
                      quote_for_message(state),
                  Outcome::unknown);
    }
  } else if (status != "cancelled") {
    return std::nullopt;
  }
  return result;
}

Decision decode_stored_decision(std::string_view state, std::string_view denial,
                                std::string_view transaction_id, std::int64_t amount) {
  Decision decision;
  decision.state = std::string(state);
  if (state == "denied") {
    decision.verdict = Decision::Verdict::denied;
    decision.denial = decode_denial(denial, transaction_id, amount);
  } else if (state == "voided") {
    decision.verdict = Decision::Verdict::cancelled;
  }
  return decision;
}

} // namespace limitcounter::detail
