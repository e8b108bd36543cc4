#include "redis/retry_policy.hpp"

#include <algorithm>
#include <cstdint>

#include "redis/cluster_protocol.hpp"

namespace limitcounter::detail {
namespace {

// `error` is `word` or starts with `word` and a space: BUSY, not BUSYGROUP.
bool has_code(std::string_view error, std::string_view word) {
  return error.substr(0, word.size()) == word &&
         (error.size() == word.size() || error[word.size()] == ' ');
}

} // namespace

bool did_not_run(const Error& e) {
  return dynamic_cast<const ServerUnavailable*>(&e) != nullptr || e.code() == errc::circuit_open ||
         e.code() == errc::connect_failed || e.code() == errc::pool_exhausted ||
         e.code() == errc::cluster_down;
}

bool refuses_functions(std::string_view error) {
  const auto names = [&](std::string_view command) {
    return error.find(command) != std::string_view::npos;
  };
  return (has_code(error, "ERR") &&
          (names("unknown command 'FCALL'") || names("unknown command 'FUNCTION'"))) ||
         (has_code(error, "NOPERM") && (names("'fcall'") || names("'function|load'")));
}

bool is_transient_error(std::string_view error) {
  return has_code(error, "TRYAGAIN") || has_code(error, "CLUSTERDOWN") ||
         has_code(error, "LOADING") || has_code(error, "MASTERDOWN") || has_code(error, "BUSY");
}

ReplyKind classify(const Reply& reply, bool cluster) {
  if (!reply.is_error()) {
    return ReplyKind::final;
  }
  const std::string_view text = reply.as_string();
  if (is_transient_error(text)) {
    return ReplyKind::transient;
  }
  if (cluster && parse_redirect(text)) {
    return ReplyKind::redirect;
  }
  if (has_code(text, "NOSCRIPT") || text == "ERR Function not found" || refuses_functions(text)) {
    return ReplyKind::noscript;
  }
  if (has_code(text, "NOAUTH")) {
    return ReplyKind::noauth;
  }
  return ReplyKind::final;
}

std::optional<std::chrono::milliseconds> RetryPolicy::after_transient(Clock::time_point now) {
  if (now >= deadline_) {
    return std::nullopt;
  }
  // Doubling stops at 2^10 (about 10 s): the budget ends the waiting long before.
  const auto backoff = first_backoff * (1 << std::min(transient_retries_, 10));
  ++transient_retries_;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - now);
  return std::min(backoff, left);
}

bool RetryPolicy::after_hop(Clock::time_point now) {
  if (now >= deadline_ || hops_ >= max_hops) {
    return false;
  }
  ++hops_;
  return true;
}

std::optional<std::chrono::milliseconds> ResendPolicy::after_lost(Clock::time_point now,
                                                                  double jitter) {
  if (sends_ >= options_.max_attempts || now >= deadline_) {
    return std::nullopt;
  }
  // Doubling stops at 2^10: the budget ends the waiting long before.
  const auto backoff = options_.backoff * (std::int64_t{1} << std::min(sends_ - 1, 10));
  ++sends_;
  const auto half = backoff / 2;
  const auto pause =
      half + std::chrono::milliseconds(static_cast<std::int64_t>(
                 std::clamp(jitter, 0.0, 1.0) * static_cast<double>((backoff - half).count())));
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - now);
  return std::min(pause, left);
}

} // namespace limitcounter::detail
