#pragma once
// The shares of several cluster transactions sent in one pipeline (one per node), a slot's
// consumes merged into batch calls of lua/limit.lua.

#include <vector>

#include <limitcounter/batch.hpp>
#include <limitcounter/redis.hpp>

namespace limitcounter::detail {

/// Every transaction's shares in one pipeline (one per node): `shares_of[k]` the k-th
/// transaction's. Consumes' shares (`consumes`) of one slot go in batch calls of lua/limit.lua,
/// each transaction decided on its own, and a consume's share sent on its own as op one. Returns
/// per transaction its shares' replies in order, or the error that is its: a call not sent or lost
/// keeps its error reply in place (eval_pipeline with refusals); the pipeline thrown as a whole, or
/// a batch call's reply that cannot be split, is every transaction's in it.
std::vector<BatchResult<std::vector<Reply>>>
run_shares(Redis& redis, bool consumes,
           const std::vector<const std::vector<ScriptCall>*>& shares_of);

} // namespace limitcounter::detail
