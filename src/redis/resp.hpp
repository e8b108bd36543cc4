#pragma once
// RESP request encoding, kept apart from I/O so it is unit-tested without a server.

#include <string>
#include <string_view>
#include <vector>

namespace limitcounter::detail {

/// Appends `argv` to `out` as one RESP array of bulk strings:
/// `*<n>\r\n` then `$<len>\r\n<bytes>\r\n` per argument. Arguments may hold any bytes.
void append_resp_command(std::string& out, const std::vector<std::string_view>& argv);

} // namespace limitcounter::detail
