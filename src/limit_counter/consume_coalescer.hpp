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
/// (DecideBatch). A
/// batch's error reply, or a reply of the wrong length, is each job's Error (server_error or
/// protocol_error, Outcome::unknown: some of the batch may have been decided); so is an item's
/// error reply. An Error thrown by `redis` is each job's as it is.
void run_consume_jobs(Redis& redis, ConsumeJob* const* jobs, std::size_t count);

} // namespace limitcounter::detail
