#pragma once
// The arguments and replies of lua/limit.lua. Pure; unit-tested without a server.

#include <string>
#include <string_view>
#include <vector>

#include <limitcounter/calendar.hpp>
#include <limitcounter/decision.hpp>
#include <limitcounter/error.hpp>
#include <limitcounter/keys.hpp>
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

/// KEYS[] and ARGV[] of one limit.lua call.
struct LimitCall {
  std::vector<std::string> keys;
  std::vector<std::string> args;
};

/// What a decide call needs besides the transaction and its rules.
struct DecideContext {
  const Calendar* calendar = nullptr;
  const CounterKeys* keys = nullptr;
  std::chrono::milliseconds window_grace{0};
  std::chrono::milliseconds record_min_ttl{0};
  std::chrono::milliseconds reservation_timeout{0};
  TimePoint now;
  /// The record key to use instead of `keys->transaction(id)` (a cluster slot's share).
  const std::string* record_key = nullptr;
};

/// The fingerprint that tells a retry of `transaction` from a different use of its id:
/// the operation, the amount and every attribute.
std::string fingerprint(std::string_view op, const Transaction& transaction);

/// Builds a consume, reserve or check call for `transaction` and its applicable rules: the
/// per-transaction rules are decided (and their denial recorded) by the same script.
LimitCall build_decide(std::string_view op, const Transaction& transaction,
                       const std::vector<const Rule*>& per_transaction_rules,
                       const std::vector<const Rule*>& window_rules, const DecideContext& context);

/// Turns a decide reply into a Decision. `call_args` are the ARGV of the call (a replay
/// brings back the first call's own). `requested_amount` is the transaction's amount.
/// Throws `Error` (conflict) when the id was used for different content.
Decision decode_decision(const Reply& reply, const std::vector<std::string>& call_args,
                         std::string_view transaction_id, std::int64_t requested_amount);

/// A decision as the home record of a transaction spread over cluster slots keeps it (see
/// lua/transaction_home.lua): verdict, denial and every rule's status, one line each, values
/// separated by spaces (rule names and window ids are key parts: no whitespace).
std::string encode_stored_decision(const Decision& decision);
/// The decision `encode_stored_decision` wrote. Throws protocol_error (Outcome::unknown)
/// naming `transaction_id` if `text` is not such an encoding.
Decision decode_stored_decision(std::string_view text, std::string_view transaction_id);

/// The share operation (lua/limit.lua) that follows a home record's expiry: a confirm "now" at
/// the largest time, so that every share still holding releases its hold as expired, whatever
/// its own (later) hold expiry.
inline std::vector<std::string> expire_share() { return {"confirm", "-1", "9007199254740991"}; }

/// Whether a share answered a confirm or refund it follows with "bad_state expired": its hold
/// was released as expired before it could follow its home record's confirm.
inline bool lost_hold(const Reply& share_reply) {
  return share_reply.as_array().size() > 1 && share_reply.at(0).as_string() == "bad_state" &&
         share_reply.at(1).as_string() == "expired";
}

} // namespace limitcounter::detail
