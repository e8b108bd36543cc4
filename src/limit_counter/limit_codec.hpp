#pragma once
// The arguments and replies of lua/limit.lua. Pure; unit-tested without a server.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <limitcounter/calendar.hpp>
#include <limitcounter/decision.hpp>
#include <limitcounter/error.hpp>
#include <limitcounter/keys.hpp>
#include <limitcounter/limit_counter.hpp>
#include <limitcounter/observer.hpp>
#include <limitcounter/reply.hpp>
#include <limitcounter/rule.hpp>
#include <limitcounter/transaction.hpp>

namespace limitcounter::detail {

/// `transaction "<id>"`, as messages about a transaction name it.
std::string quoted_id(std::string_view transaction_id);

/// The error of an id sent again with another operation, amount or attributes.
Error reused_id(std::string_view transaction_id);

/// The parts of `text` between `separator`s (views into `text`; none for an empty text).
std::vector<std::string_view> split(std::string_view text, char separator);

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

/// What a decide call takes from one rule whatever the transaction, built once per rule set
/// (`RuleSetArgs`) so that a call copies it instead of building it.
struct RuleArgs {
  std::string counter_name;
  /// With one bucket, where the counter name is the tag: `<prefix>{<counter name>}:`, the
  /// head of the rule's window keys. Empty with several buckets, where the tag depends on the
  /// dimension.
  std::string window_key_head;
};

/// The RuleArgs of `rule` under `keys`.
RuleArgs rule_args(const Rule& rule, const CounterKeys& keys);

/// The RuleArgs of every rule of one rule set under one CounterKeys. Immutable once built, so
/// any thread may read it; it is only valid while that rule set lives unchanged (the set in
/// force holds it, and `set_rules` replaces both together).
class RuleSetArgs {
public:
  RuleSetArgs(const RuleSet& rules, const CounterKeys& keys);
  /// The args of `rule` if it is one of the set's rules (by address), else nullptr.
  const RuleArgs* find(const Rule* rule) const noexcept;
  /// A number no other RuleSetArgs of this process has (1, 2, ...): what a call template kept
  /// for these args is known by, so that it never serves another rule set at the same address.
  std::uint64_t id() const noexcept { return id_; }

private:
  std::uint64_t id_;
  const std::vector<Rule>* rules_;
  std::vector<RuleArgs> args_;
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

/// The fingerprint, amount and record expiry of a decide call built by `build_decide`.
const std::string& decide_fingerprint(const std::vector<std::string>& args);
const std::string& decide_amount(const std::vector<std::string>& args);
const std::string& decide_record_expiry(const std::vector<std::string>& args);

/// The most transactions one batch call decides: the script runs this long without another
/// client getting a turn (~64 x 5 us here).
constexpr std::size_t max_decide_batch = 64;

/// Decide calls of consume, joined into one call of lua/limit.lua's op batch: one header (the
/// latest call's `now` and record expiry: a consume queued behind a stalled call is decided at
/// its own time or later, so a hold that expired before it was made never denies it, and every
/// record keeps at least its own replay horizon), each distinct rule program and each distinct
/// counter set once, then every transaction's own values (counter set number when there are
/// several sets, fingerprint, amount, fields) as one MessagePack array of strings.
class DecideBatch {
public:
  /// Adds the call `keys`, `args` (as `build_decide` made them, op consume).
  void add(std::vector<std::string>&& keys, std::vector<std::string>&& args);
  /// How many calls were added since the last `take`.
  std::size_t size() const noexcept { return size_; }
  /// The batch call's KEYS and ARGV; the batch is empty again after.
  std::pair<std::vector<std::string>, std::vector<std::string>> take();

private:
  struct CounterSet {
    std::size_t program = 0; // index into programs_
    std::string name;
    std::string text;
    std::vector<std::string> keys; // the set's key, then its counters' and its hold sets'
  };
  std::size_t size_ = 0;
  std::vector<std::string> header_;                           // now, record expiry, hold expiry
  std::vector<std::pair<std::string, std::string>> programs_; // numbers, names
  std::vector<CounterSet> sets_;
  std::vector<std::size_t> transaction_sets_; // index into sets_, per transaction
  std::vector<std::string> transactions_;     // fingerprint, amount, fields, per transaction
  std::vector<std::string> records_;
};

/// What a refund, confirm or cancel brings of the original transaction for when its record is
/// gone (lua/limit.lua, ARGV[o..o+6]): appends them to `args` and returns the counter set key
/// (KEYS[2]). The counters are those of `window_rules` (the rules in force now).
std::string append_original(std::vector<std::string>& args, const Transaction& original,
                            const std::vector<const Rule*>& window_rules,
                            const DecideContext& context);

/// The replies of a batch call (op batch: one flat array, each transaction's reply after the
/// one before; see lua/limit.lua), one per transaction as `decode_decision` reads them. Throws
/// protocol_error (Outcome::unknown) unless the reply holds exactly `count` of them.
std::vector<Reply> split_decide_replies(const Reply& reply, std::size_t count);

/// Turns a decide reply (one transaction's) into a Decision, read with the call's `shape`.
/// `requested_amount` is the transaction's amount. Throws `Error` (conflict) when the id was used
/// for different content. A replay reports the first decision's verdict and denial, and the call's
/// rules with their counters' totals as they are now.
Decision decode_decision(const Reply& reply, const DecideShape& shape,
                         std::string_view transaction_id, std::int64_t requested_amount);

/// The denial a record keeps ("<rule> <metric> <limit> <used>"; see lua/limit.lua), for a
/// transaction of `requested_amount`. Throws protocol_error naming `transaction_id`.
Denial decode_denial(std::string_view text, std::string_view transaction_id,
                     std::int64_t requested_amount);

/// What the home record of a cluster transaction (lua/transaction_home.lua) keeps of its first
/// decision besides its state: the denial, as `decode_denial` reads it ("" when allowed). No
/// rule's status: the record keeps no counter's totals (issue 14).
std::string encode_stored_decision(const Decision& decision);
/// The first decision of a home record in `state` ("denied", "voided", ...) with the stored
/// `denial`, for a transaction of `amount`: denied with its denial, cancelled when the sweep
/// voided it, else allowed; `state` set, `rules` empty. Throws protocol_error (Outcome::unknown)
/// naming `transaction_id` if a denied record's denial is not one.
Decision decode_stored_decision(std::string_view state, std::string_view denial,
                                std::string_view transaction_id, std::int64_t amount);

/// A confirm's reply (lua/limit.lua, or lua/transaction_home.lua on a cluster): "confirmed" as
/// confirmed now, "already" (confirmed before) as `replayed`; empty for any other reply (an
/// error the caller names).
std::optional<ConfirmResult> decode_confirm(const Reply& reply);
/// A cancel's reply, likewise: "cancelled" as cancelled now, "tombstone" as recorded_unknown,
/// "already" with the state the record shows: "expired" (the timeout ended it, no cancel did)
/// as expired, "cancelled" (an earlier cancel, or its tombstone) or "voided" (the cluster
/// sweep abandoned its reserve) as a replayed cancel. Empty for any other reply; throws
/// protocol_error (Outcome::unknown) naming `transaction_id` for "already" with another state.
std::optional<CancelResult> decode_cancel(const Reply& reply, std::string_view transaction_id);

/// The share operation (lua/limit.lua) that follows a home record's expiry: a confirm "now" at
/// the largest time, so that every share still holding releases its hold as expired, whatever
/// its own (later) hold expiry.
inline std::vector<std::string> expire_share() { return {"confirm", "-1", "9007199254740991"}; }

/// Whether a share's reply to the confirm (or refund) by which it follows its home record's
/// confirm says its hold was lost before it could follow: "expired" (this confirm found its hold
/// released by a sweep and recorded it expired) or "bad_state expired" (recorded so before).
/// Its counters then do not count the confirmed amount.
inline bool lost_hold(const Reply& share_reply) {
  const std::string& status = share_reply.at(0).as_string();
  return status == "expired" || (share_reply.as_array().size() > 1 && status == "bad_state" &&
                                 share_reply.at(1).as_string() == "expired");
}

} // namespace limitcounter::detail
