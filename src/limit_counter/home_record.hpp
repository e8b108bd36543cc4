#pragma once
// The home record of a cluster transaction (lua/transaction_home.lua) as the client reads it.
// Pure; unit-tested without a server.

#include <map>
#include <string>
#include <string_view>

namespace limitcounter::detail {

/// What a home record compares retries by: "<digest>:<amount>", the decide call's 64-bit
/// fingerprint `digest_hex` (16 hex digits) in 11 base64url characters (5 bytes less in every
/// home record) and the amount in decimal. A digest that is not 16 hex digits is kept as it is.
std::string home_fingerprint(std::string_view digest_hex, std::string_view amount);

/// Adds to `fields`, a home record's one-letter fields (`f` fingerprint "<digest>:<amount>",
/// `s` state letter, `a` confirmed amount, `r` refunded, `h` hold expiry), the names a share
/// record's fields have in lua/limit.lua's inspect: state (in full), amount, refunded ("0"
/// before the first refund) and hexp (a reservation's).
void name_home_fields(std::map<std::string, std::string>& fields);

} // namespace limitcounter::detail
