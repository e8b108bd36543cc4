#pragma once
// The text a record keeps of its first decision: a limit.lua record's denial, and a cluster's
// home record's stored decision (lua/transaction_home.lua). Pure; unit-tested without a server.

#include <cstdint>
#include <string>
#include <string_view>

#include <limitcounter/decision.hpp>

namespace limitcounter::detail {

/// The denial a record keeps ("<rule> <metric> <limit> <used>"; see lua/limit.lua), for a
/// transaction of `requested_amount`. Throws protocol_error naming `transaction_id`.
Denial decode_denial(std::string_view text, std::string_view transaction_id,
                     std::int64_t requested_amount);

/// What the home record of a cluster transaction (lua/transaction_home.lua) keeps of its first
/// decision besides its state: the denial, as `decode_denial` reads it ("" when allowed). No
/// rule's status: the record keeps no counter's totals (issue 14).
std::string encode_stored_decision(const Decision& decision);
/// The first decision of a home record in `state` with the stored `denial`, for a transaction of
/// `amount`: denied with its denial, cancelled when the sweep voided it, else allowed; `state`
/// set, `rules` empty. Throws protocol_error (Outcome::unknown) naming `transaction_id` if a
/// denied record's denial is not one.
Decision decode_stored_decision(TransactionState state, std::string_view denial,
                                std::string_view transaction_id, std::int64_t amount);

} // namespace limitcounter::detail
