#pragma once
// Concurrent consumes of one LimitCounter merged into batch calls of lua/limit.lua
// (LimitCounterOptions::consume_in_flight).

#include <optional>
#include <string>
#include <vector>

#include <limitcounter/error.hpp>
#include <limitcounter/redis.hpp>

#include "shared/coalescer.hpp"

namespace limitcounter::detail {

/// One consume's one-slot call (as `build_decide` made it) and, once run, its own reply (an
/// element of the batch's reply) or its own copy of the batch's error.
struct ConsumeJob {
  ScriptCall* call = nullptr;
  Reply reply;
  std::optional<Error> error;
};

class ConsumeCoalescer : public Coalescer<ConsumeJob> {
public:
  using Coalescer<ConsumeJob>::Coalescer;
};

/// Runs the `count` jobs at `jobs` on `redis`: one job as its own call, more as one batch call
/// (DecideBatch). A lone job gets its call's reply, or the Error `redis` threw, as a lone
/// consume would. A batch's error reply and a reply that is not `count` transactions' replies
/// (split_decide_replies) are Errors with Outcome::unknown (the transactions before a failing
/// one were decided); any other Error `redis` threw (not sent, may have run) is each job's as
/// it is.
void run_consume_jobs(Redis& redis, ConsumeJob* const* jobs, std::size_t count);

} // namespace limitcounter::detail
