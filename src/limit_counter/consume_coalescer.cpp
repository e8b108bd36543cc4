#include "limit_counter/consume_coalescer.hpp"

#include <limitcounter/detail/lua_scripts.hpp>

#include "limit_counter/limit_codec.hpp"

namespace limitcounter::detail {

void run_consume_jobs(Redis& redis, ConsumeJob* const* jobs, std::size_t count) {
  try {
    if (count == 1) {
      jobs[0]->reply = redis.eval(scripts::limit, jobs[0]->call->keys, jobs[0]->call->args);
      return;
    }
    DecideBatch batch;
    for (std::size_t i = 0; i < count; ++i) {
      batch.add(std::move(jobs[i]->call->keys), std::move(jobs[i]->call->args));
    }
    const auto [keys, args] = batch.take();
    const Reply reply = redis.eval(scripts::limit, keys, args); // an error reply throws
    if (reply.type() != Reply::Type::array || reply.as_array().size() != count) {
      throw Error(errc::protocol_error,
                  "a batch of " + std::to_string(count) +
                      " limit calls answered: " + reply.debug_string(),
                  Outcome::unknown);
    }
    for (std::size_t i = 0; i < count; ++i) {
      const Reply& own = reply.as_array()[i];
      if (own.is_error()) {
        jobs[i]->error = Error(errc::server_error, own.as_string(), Outcome::unknown);
      } else {
        jobs[i]->reply = own;
      }
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
