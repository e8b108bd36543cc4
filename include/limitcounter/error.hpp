#pragma once
// Errors: one exception type, an error code with its own category, and the
// outcome of the Redis command that failed (did it run or not).

#include <stdexcept>
#include <string>
#include <system_error>

namespace limitcounter {

/// What went wrong. Codes below 100 are caller errors (bad input, state);
/// codes from 100 are infrastructure errors (connection, server, protocol).
enum class errc {
  invalid_argument = 1,   ///< a value the library refuses; the message names it
  unknown_time_zone = 2,  ///< the IANA zone name is not in the time zone database
  precision_overflow = 3, ///< an amount or total would pass 2^53 (Lua numbers are doubles)
  window_closed = 4, ///< the window (plus grace) has already ended: its keys would expire at once
  conflict =
      5, ///< the same id was used with different content, or a state transition is not allowed
  not_found = 6,        ///< an unknown id
  cross_slot = 7,       ///< one call would touch keys of several Redis Cluster slots
  connect_failed = 100, ///< no connection could be made; nothing was sent
  pool_exhausted = 101, ///< no connection became free within the time budget; nothing was sent
  io_error = 102,       ///< the connection broke while sending or receiving
  timeout = 103,        ///< no reply within the command timeout
  server_error = 104,   ///< Redis answered with an error reply
  protocol_error = 105, ///< the reply did not have the shape the library expects
  cluster_down = 106,   ///< the cluster could not route the command after bounded retries
  circuit_open = 107,   ///< Redis kept failing: calls fail fast until a probe succeeds
};

/// The category of `errc`; its name is "limitcounter".
const std::error_category& error_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

/// Whether the Redis command behind an error ran.
enum class Outcome {
  not_sent, ///< nothing reached Redis (bad input, no connection): safe to retry, Redis is untouched
  failed,   ///< Redis ran the command and answered with an error: it changed nothing (scripts
            ///< validate before writing)
  unknown,  ///< the command may have run (timeout or broken connection after sending): retry with
            ///< the same id
};

/// Base of every exception the library throws. `what()` names the bad value or
/// the failing server; `code()` says what kind of failure it is.
class Error : public std::runtime_error {
public:
  /// `message` should name the bad value or the failing server; `outcome` says whether the
  /// command behind the error ran.
  Error(errc code, const std::string& message, Outcome outcome = Outcome::not_sent)
      : std::runtime_error(message), code_(make_error_code(code)), outcome_(outcome) {}

  /// The kind of failure, in the "limitcounter" category.
  const std::error_code& code() const noexcept { return code_; }
  /// Whether Redis ran the command (see `Outcome`): decides if and how to retry.
  Outcome outcome() const noexcept { return outcome_; }
  /// True for caller errors (bad input, unknown id, conflict), false for infrastructure errors.
  bool is_input_error() const noexcept { return code_.value() < 100; }

private:
  std::error_code code_;
  Outcome outcome_;
};

} // namespace limitcounter

/// \cond
// Lets a std::error_code be built from an errc (and compared with one).
template <> struct std::is_error_code_enum<limitcounter::errc> : std::true_type {};
/// \endcond
