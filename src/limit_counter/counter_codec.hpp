#pragma once
// The value format of a counter field and the replies of counter scripts. Pure
// functions, unit-tested without a server.

#include <cstddef>
#include <string_view>
#include <vector>

#include <limitcounter/reply.hpp>
#include <limitcounter/usage.hpp>

namespace limitcounter::detail {

/// Parses a field value `<count>:<amount>`. Throws `Error` (protocol_error) naming the text
/// for anything else (a field written by something other than this library).
Usage parse_counter_value(std::string_view text);

/// The reply of counter_add for `windows` windows: {"ok", c1, a1, c2, a2, ...}.
/// An "overflow" reply throws `Error` (precision_overflow) naming `context` and the
/// totals; any other shape throws protocol_error.
std::vector<Usage> decode_counter_add(const Reply& reply, std::size_t windows,
                                      std::string_view context);

} // namespace limitcounter::detail
