#pragma once
// Runs prepared script calls in one pipeline and turns each reply into its own result.

#include <cstddef>
#include <utility>
#include <variant>
#include <vector>

#include <limitcounter/batch.hpp>
#include <limitcounter/redis.hpp>

namespace limitcounter::detail {

/// The value of `result`, or its error thrown (one result of a batch taken as a lone call's).
template <typename T> T value_or_throw(BatchResult<T>&& result) {
  if (auto* error = std::get_if<Error>(&result)) {
    throw std::move(*error);
  }
  return std::move(std::get<T>(result));
}

/// `decode(i, replies[i])` per reply, in order. An error reply, or an Error thrown by
/// `decode`, becomes that call's result alone.
template <typename T, typename Decode>
std::vector<BatchResult<T>> decode_batch(const std::vector<Reply>& replies, Decode&& decode) {
  std::vector<BatchResult<T>> results;
  results.reserve(replies.size());
  for (std::size_t i = 0; i < replies.size(); ++i) {
    try {
      if (replies[i].is_error()) {
        throw Error(errc::server_error, replies[i].as_string(), Outcome::failed);
      }
      results.emplace_back(decode(i, replies[i]));
    } catch (const Error& e) {
      results.emplace_back(e);
    }
  }
  return results;
}

/// Sends `calls` in one pipeline and decodes the replies as `decode_batch`. A connection
/// failure throws for the whole batch (see `Redis::eval_pipeline`).
template <typename T, typename Decode>
std::vector<BatchResult<T>> run_batch(Redis& redis, const std::vector<ScriptCall>& calls,
                                      Decode&& decode) {
  if (calls.empty()) {
    return {};
  }
  return decode_batch<T>(redis.eval_pipeline(calls), std::forward<Decode>(decode));
}

} // namespace limitcounter::detail
