#pragma once
// The result type of the pipelined batch calls (add_many, consume_many,
// take_daily_cap_many, hit_sliding_window_many, Wallet::deduct_many).

#include <variant>

#include <limitcounter/error.hpp>

namespace limitcounter {

/// One result of a batch: the value, or the error that call alone ran into. A batch is
/// not atomic: each call in it is on its own, and one call's error leaves the others'
/// results intact. Test with `std::holds_alternative<Error>(result)`.
template <typename T> using BatchResult = std::variant<T, Error>;

} // namespace limitcounter
