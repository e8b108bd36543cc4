#pragma once
// The status a string-led reply of lua/limit.lua or lua/transaction_home.lua begins with (their
// contracts list them; a decide op answers with integers instead), and the transaction states
// their replies and records name, read once where the reply arrives so that callers compare an
// enum, never a word. Pure; unit-tested without a server.

#include <string_view>

#include <limitcounter/reply.hpp>
#include <limitcounter/transaction_state.hpp>

namespace limitcounter::detail {

enum class ReplyStatus {
  adopted,
  already,
  bad_state,
  cancelled,
  changed,
  closed,
  confirmed,
  conflict,
  exists,
  expired,
  final_,
  first,
  follow,
  go,
  mismatch,
  missing,
  needs,
  none,
  other, ///< a void of a share record that is another transaction's (lua/limit.lua op void)
  pending,
  record,
  refunded,
  tombstone,
  too_much,
  unknown,
  voided,
};

/// The status `reply` begins with. Throws protocol_error (Outcome::unknown) naming its first
/// value if that is no status of either script (and as `Reply::as_string` does if it is no
/// string).
ReplyStatus reply_status(const Reply& reply);

/// The word of `status`, as the scripts write it.
std::string_view to_string(ReplyStatus status);

/// The state `word` names (the words of `to_string(TransactionState)`). Throws protocol_error
/// (Outcome::unknown) naming `word` and `where` (the reply or record it came from) if it names
/// none.
TransactionState transaction_state(std::string_view word, std::string_view where);

} // namespace limitcounter::detail
