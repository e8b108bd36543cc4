#include "limit_counter/consume_coalescer.hpp"

#include <limitcounter/detail/lua_scripts.hpp>

#include "limit_counter/limit_codec.hpp"

namespace limitcounter::detail {

void run_consume_jobs(Redis& redis, std::vector<ConsumeJob*>& jobs) {
  try {
    if (jobs.size() == 1) {
      jobs.front()->reply =
          redis.eval(scripts::limit, jobs.front()->call->keys, jobs.front()->call->args);
      return;
    }
    DecideBatch batch;
    for (ConsumeJob* job : jobs) {
      batch.add(std::move(job->call->keys), std::move(job->call->args));
    }
    const auto [keys, args] = batch.take();
    const Reply reply = redis.eval(scripts::limit, keys, args);
    if (reply.is_error()) {
      throw Error(errc::server_error, reply.as_string(), Outcome::unknown);
    }
    if (reply.type() != Reply::Type::array || reply.as_array().size() != jobs.size()) {
      throw Error(errc::protocol_error,
                  "a batch of " + std::to_string(jobs.size()) +
                      " limit calls answered: " + reply.debug_string(),
                  Outcome::unknown);
    }
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      const Reply& own = reply.as_array()[i];
      if (own.is_error()) {
        jobs[i]->error = Error(errc::server_error, own.as_string(), Outcome::unknown);
      } else {
        jobs[i]->reply = own;
      }
    }
  } catch (const Error& e) {
    for (ConsumeJob* job : jobs) {
      job->error = e;
    }
  }
}

} // namespace limitcounter::detail
