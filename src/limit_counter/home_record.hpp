#pragma once
// The home record of a cluster transaction (lua/transaction_home.lua) as the client reads it.
// Pure; unit-tested without a server.

#include <map>
#include <string>

namespace limitcounter::detail {

/// Adds to `fields`, a home record's one-letter fields (`f` fingerprint "<digest>:<amount>",
/// `s` state letter, `a` confirmed amount, `r` refunded, `h` hold expiry), the names a share
/// record's fields have in lua/limit.lua's inspect: state (in full), amount, refunded ("0"
/// before the first refund) and hexp (a reservation's).
void name_home_fields(std::map<std::string, std::string>& fields);

} // namespace limitcounter::detail
