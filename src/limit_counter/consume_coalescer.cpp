#include "limit_counter/consume_coalescer.hpp"

#include <limitcounter/detail/lua_scripts.hpp>

#include "limit_counter/codec/decide_batch.hpp"
#include "limit_counter/codec/decide_replies.hpp"

namespace limitcounter::detail {

void run_consume_jobs(Redis& redis, ConsumeJob* const* jobs, std::size_t count) {
  try {
    if (count == 1) {
      jobs[0]->reply =
          redis.eval(scripts::limit, jobs[0]->call->keys, jobs[0]->call->args, Resend::same_id);
      return;
    }
    DecideBatch batch;
    for (std::size_t i = 0; i < count; ++i) {
      batch.add(std::move(jobs[i]->call->keys), std::move(jobs[i]->call->args));
    }
    const auto [keys, args] = batch.take();
    // (an error reply throws)
    std::vector<Reply> replies =
        split_decide_replies(redis.eval(scripts::limit, keys, args, Resend::same_id), count);
    for (std::size_t i = 0; i < count; ++i) {
      jobs[i]->reply = std::move(replies[i]);
    }
  } catch (const Error& e) {
    if (count > 1 && e.outcome() == Outcome::failed) {
      // Redis answered the merged call with an error (a script error part way): the
      // transactions before the failing one were decided, so no caller may hear "changed
      // nothing"; each retries with its id, which replays what Redis decided.
      const Error unknown(static_cast<errc>(e.code().value()), e.what(), Outcome::unknown);
      for (std::size_t i = 0; i < count; ++i) {
        jobs[i]->error = unknown;
      }
      return;
    }
    for (std::size_t i = 0; i < count; ++i) {
      jobs[i]->error = e;
    }
  }
}

} // namespace limitcounter::detail
