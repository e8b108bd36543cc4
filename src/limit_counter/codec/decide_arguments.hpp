#pragma once
// The arguments (KEYS and ARGV) of lua/limit.lua's decide calls (consume, reserve, check), and
// the original transaction a refund, confirm or cancel brings along. Pure; unit-tested without a
// server.

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <limitcounter/calendar.hpp>
#include <limitcounter/keys.hpp>
#include <limitcounter/observer.hpp>
#include <limitcounter/rule.hpp>
#include <limitcounter/transaction.hpp>

#include "limit_counter/codec/rule_args.hpp"

namespace limitcounter::detail {

/// What the reply of a decide call is read with. Kept by the client, never sent: the record
/// in Redis keeps none of it, so that a replay costs no stored description.
struct DecideShape {
  /// One counter of the call, in call order.
  struct Counter {
    Period period;
    std::string window_id;
    TimePoint resets_at;
  };
  /// One rule of the call, in call order: `counter` is its counter's number (1..), 0 for a
  /// per-transaction rule. `rule` points into the rule set the call was built from, which
  /// must outlive the shape.
  struct RuleRef {
    const Rule* rule = nullptr;
    std::size_t counter = 0;
  };
  std::vector<Counter> counters;
  std::vector<RuleRef> rules;
};

/// KEYS[] and ARGV[] of one limit.lua call, and the shape its reply is read with.
struct LimitCall {
  std::vector<std::string> keys;
  std::vector<std::string> args;
  DecideShape shape;
};

/// What a decide call needs besides the transaction and its rules.
struct DecideContext {
  const Calendar* calendar = nullptr;
  const CounterKeys* keys = nullptr;
  /// The args of the rules' set, built under `keys`; without it, each call builds its own.
  const RuleSetArgs* rule_args = nullptr;
  std::chrono::milliseconds window_grace{0};
  /// How long the record is kept (LimitCounterOptions::replay_horizon).
  std::chrono::milliseconds replay_horizon{0};
  std::chrono::milliseconds reservation_timeout{0};
  TimePoint now;
  /// The record key to use instead of `keys->transaction(id)` (a cluster slot's share).
  const std::string* record_key = nullptr;
  /// Whether a window that closed more than `window_grace` ago is refused (window_closed): not
  /// for an original transaction brought to a reversal, whose windows may be long over.
  bool refuse_closed_windows = true;
};

/// The digest (11 base64url digits, FNV-1a 64) that tells, with the amount, a retry of
/// `transaction` from a different use of its id: of the operation and every attribute, each
/// part with its length. Not collision-resistant against a chosen input: it compares the
/// calls of one host for one id.
std::string fingerprint(LimitOp op, const Transaction& transaction);

/// The counter set key of record `record_key`'s slot (see lua/limit.lua): `<prefix>cs:<name>`
/// for `<prefix>tx:{<id>}`, `<prefix>{<tag>}:cs:<name>` for a share `<prefix>{<tag>}:tx:<id>`.
std::string counter_set_key(std::string_view record_key, std::string_view name);

/// Builds a consume, reserve or check call for `transaction` and its applicable rules: the
/// per-transaction rules are decided (and their denial recorded) by the same script.
LimitCall build_decide(LimitOp op, const Transaction& transaction,
                       const std::vector<const Rule*>& per_transaction_rules,
                       const std::vector<const Rule*>& window_rules, const DecideContext& context);

/// The fingerprint and amount of a decide call built by `build_decide`.
const std::string& decide_fingerprint(const std::vector<std::string>& args);
const std::string& decide_amount(const std::vector<std::string>& args);
/// How long the record of a decide call built by `build_decide` is kept (ms, by the clock of the
/// server that writes it).
std::int64_t decide_record_lifetime(const std::vector<std::string>& args);

/// The arguments of lua/limit.lua's op one, a host's lone consume, from `args` of a consume
/// call of one transaction built by `build_decide` (taken from it): the same, without the
/// numbers of transactions, programs and counter sets (each 1) and the hold expiry.
std::vector<std::string> lone_consume_args(std::vector<std::string>&& args);

/// What a refund, confirm or cancel brings of the original transaction for when its record is
/// gone (lua/limit.lua, ARGV[o..o+6]): appends them to `args` and returns the counter set key
/// (KEYS[2]). The counters are those of `window_rules` (the rules in force now).
std::string append_original(std::vector<std::string>& args, const Transaction& original,
                            const std::vector<const Rule*>& window_rules,
                            const DecideContext& context);

/// Where the parts of a single decide call (build_decide) are: its header (op, n, now, record
/// expiry, hold expiry, P), its program (numbers, names), S, its counter set (program number,
/// name, text) and its transaction (fingerprint, amount, fields: with one set, no set number).
struct DecideLayout {
  static constexpr std::size_t program = 6;
  static constexpr std::size_t set = 9;
  static constexpr std::size_t transaction = 12;
};

} // namespace limitcounter::detail
