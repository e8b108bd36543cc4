#include "limit_counter/codec/decide_arguments.hpp"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <optional>

#include "limit_counter/codec/call_template.hpp"
#include "shared/amount.hpp"

namespace limitcounter::detail {

namespace {

std::string number_arg(std::int64_t value) {
  char digits[24];
  return std::string(digits, std::to_chars(std::begin(digits), std::end(digits), value).ptr);
}

std::string record_key_of(const Transaction& transaction, const DecideContext& context) {
  return context.record_key != nullptr ? *context.record_key
                                       : context.keys->transaction(transaction.id);
}

} // namespace

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
  // hold sets, whose members say what to release); never shorter than a hold. A lifetime, which
  // the server counts by its own clock: a client's clock behind the server's cannot make a
  // record that is gone at once (a retry would count again).
  const std::chrono::milliseconds record_lifetime =
      std::max(context.replay_horizon, context.reservation_timeout);
  // Without counters the call's own record stands in for the set (see CallTemplate): not the
  // record of the transaction the template was built for, which is in another slot of a cluster.
  call.keys.push_back(shared.counter_keys.empty() ? call.keys.front() : shared.set_key);
  call.keys.insert(call.keys.end(), shared.counter_keys.begin(), shared.counter_keys.end());
  call.keys.insert(call.keys.end(), shared.hold_keys.begin(), shared.hold_keys.end());

  call.args.reserve(DecideLayout::transaction + 3);
  call.args.emplace_back(to_string(op));
  call.args.emplace_back("1");
  call.args.push_back(number_arg(unix_millis(context.now)));
  call.args.push_back(number_arg(record_lifetime.count()));
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

std::int64_t decide_record_lifetime(const std::vector<std::string>& args) {
  return std::stoll(args.at(3));
}

std::vector<std::string> lone_consume_args(std::vector<std::string>&& args) {
  using at = DecideLayout;
  // in place (each argument moves to a lower index than its own): no new vector
  args.at(0) = "one";
  std::size_t to = 1;
  // now, record lifetime; the program, its names; the counter set's name, text; the transaction
  for (const std::size_t from :
       {std::size_t{2}, std::size_t{3}, at::program, at::program + 1, at::set + 1, at::set + 2,
        at::transaction, at::transaction + 1, at::transaction + 2}) {
    args[to++] = std::move(args.at(from));
  }
  args.resize(to);
  return std::move(args);
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

} // namespace limitcounter::detail
