// Runs lua/limit.lua's reversals (refund, confirm, cancel, void, inspect) with every key they
// touch declared in KEYS, so that Redis's migration guard (TRYAGAIN/ASK while a slot is half
// moved) covers them all. The caller knows a reversal's record key; the keys of its counters
// and hold sets are read first (GET of the record, GET of its counter set, whose text never
// changes under its name and is kept in a small cache). Should the record change between that
// read and the call, the script names what it lacks ({"needs", key...}, having written
// nothing) and the call goes again with those keys too.
#pragma once

#include <string>
#include <vector>

#include <limitcounter/redis.hpp>

namespace limitcounter::detail {

/// Whether `reply` is lua/limit.lua's {"needs", key...}.
bool needs_keys(const Reply& reply);

/// The keys besides its record that a reversal of the record `keys.front()` touches, as the
/// record (or, with no record, the counter set `keys[1]` of an original the call brings) says
/// now: its counter set, the set's counters and hold sets (some may be in `keys` already).
/// Throws what `Redis::command` throws.
std::vector<std::string> reversal_keys(Redis& redis, const std::vector<std::string>& keys);

/// Runs `call` (as `Redis::eval` with `call.resend`) with the keys `reversal_keys` finds, until
/// it needs no key it did not declare.
/// Throws protocol_error (Outcome::failed: no round wrote anything) if it still needs keys after
/// a few rounds, and whatever `Redis::eval` throws.
Reply eval_declaring(Redis& redis, ScriptCall call);

/// `Redis::eval_pipeline(calls)` of reversal calls, where the calls on one record
/// (keys.front()) follow each other in order, each with the keys its record needs. A call that
/// still needed keys wrote nothing, so it and every later call on its record are sent again
/// (the calls before it stand). Error replies are returned in place.
std::vector<Reply> eval_pipeline_declaring(Redis& redis, std::vector<ScriptCall> calls);

} // namespace limitcounter::detail
