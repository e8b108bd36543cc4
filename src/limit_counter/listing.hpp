#pragma once
// Reading counters without changing them: shared by `usage` and the listing calls.

#include <string>
#include <string_view>

#include <limitcounter/redis.hpp>
#include <limitcounter/usage.hpp>

namespace limitcounter::detail {

/// Throws `Error` (server_error, Outcome::failed) naming `what` and the server's text if
/// `reply` is an error reply.
void unless_error(const Reply& reply, std::string_view what);

/// The usage in `field` of the hash `key` (zero when the key or field does not exist), by one
/// HGET. `what` names the counter in errors.
Usage read_usage(Redis& redis, const std::string& key, const std::string& field,
                 std::string_view what);

} // namespace limitcounter::detail
