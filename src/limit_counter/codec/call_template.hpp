#pragma once
// The part of a decide call that depends on its rules and windows only, and its reuse per thread:
// what build_decide and append_original (decide_arguments.cpp) build their calls from. Internal to
// the codec.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <limitcounter/calendar.hpp>
#include <limitcounter/keys.hpp>
#include <limitcounter/rule.hpp>
#include <limitcounter/transaction.hpp>

#include "limit_counter/codec/decide_arguments.hpp"

namespace limitcounter::detail {

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

// How long a counter set outlives the last record a decision may write naming it: the clocks of
// the callers, whose records expire by their own clocks (lua/limit.lua, "Counter set").
inline constexpr std::chrono::milliseconds counter_set_margin = std::chrono::hours(1);

// What a decide call takes from its rules and windows: everything but the transaction's own
// values (id, fingerprint, amount, dimension values) and the call's times. With one bucket the
// counters' keys do not depend on the dimension values either, so a template is kept per thread
// and reused while a host decides transactions under the same rules in the same windows.
struct CallTemplate {
  // What it was built for (what a reuse compares).
  std::uint64_t rule_set_id = 0; // RuleSetArgs::id(); 0: built for one call only
  const CounterKeys* keys = nullptr;
  std::chrono::milliseconds grace{0};
  std::chrono::milliseconds horizon{0}; // the replay horizon: the counter set's expiry has it
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
  // its key, in the slot of the record it was built for; without counters that record's own
  // key (build_decide puts the call's own record there instead: the template is shared)
  std::string set_key;
  DecideShape shape;

  bool fits(const std::vector<const Rule*>& per_transaction, const std::vector<const Rule*>& window,
            const std::vector<TimePoint>& ends, const DecideContext& context) const {
    return rule_set_id != 0 && rule_set_id == context.rule_args->id() && keys == context.keys &&
           grace == context.window_grace && horizon == context.replay_horizon &&
           per_transaction_rules == per_transaction && window_rules == window &&
           window_ends == ends;
  }

  CallTemplate(const Transaction& transaction, const std::vector<const Rule*>& per_transaction,
               const std::vector<const Rule*>& window, const std::vector<Window>& windows,
               const std::string& record_key, const DecideContext& context);

  // The transaction's distinct fields, ':'-joined, as its record keeps them.
  std::string fields_word(const Transaction& transaction) const;
};

// The windows of the window rules at the transaction's time, one per rule (computed once per
// period), each checked open unless the context says otherwise.
std::vector<Window> windows_of(const Transaction& transaction,
                               const std::vector<const Rule*>& window_rules,
                               const DecideContext& context);

// The template of a call for these rules and windows: the thread's if it has one that fits
// (one bucket, a standalone record, the rule set's args), else one built for `call_template`'s
// caller alone in `own`.
const CallTemplate& call_template(const Transaction& transaction,
                                  const std::vector<const Rule*>& per_transaction_rules,
                                  const std::vector<const Rule*>& window_rules,
                                  const std::string& record, const DecideContext& context,
                                  std::optional<CallTemplate>& own);

} // namespace limitcounter::detail
