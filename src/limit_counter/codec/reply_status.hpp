#pragma once
// The status a string-led reply of lua/limit.lua or lua/transaction_home.lua begins with (their
// contracts list them; a decide op answers with integers instead), read once where the reply
// arrives so that callers compare an enum, never a word. Pure; unit-tested without a server.

#include <string_view>

#include <limitcounter/reply.hpp>

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

} // namespace limitcounter::detail
