#pragma once
// What the codecs of lua/limit.lua and their callers share: how a message names a transaction,
// the error of a reused id, and splitting a reply's or a record's text. Pure.

#include <string>
#include <string_view>
#include <vector>

#include <limitcounter/error.hpp>

namespace limitcounter::detail {

/// `transaction "<id>"`, as messages about a transaction name it.
std::string quoted_id(std::string_view transaction_id);

/// The error of an id sent again with another operation, amount or attributes.
Error reused_id(std::string_view transaction_id);

/// The parts of `text` between `separator`s (views into `text`; none for an empty text).
std::vector<std::string_view> split(std::string_view text, char separator);

} // namespace limitcounter::detail
