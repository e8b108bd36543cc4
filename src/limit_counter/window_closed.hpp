#pragma once
// The check that keeps counts out of windows whose keys would expire at once.

#include <string>
#include <string_view>

#include <limitcounter/calendar.hpp>
#include <limitcounter/error.hpp>

namespace limitcounter::detail {

/// Throws window_closed unless `window` of `counter` is still open at `now`, i.e. its end
/// plus `grace` (when its key expires) is after `now`.
inline void check_window_open(std::string_view counter, Period period, const Window& window,
                              std::chrono::milliseconds grace, TimePoint now) {
  if (window.end + grace <= now) {
    throw Error(errc::window_closed, std::string(to_string(period)) + " window " + window.id +
                                         " of counter " + std::string(counter) +
                                         " has closed (its key would expire at once)");
  }
}

} // namespace limitcounter::detail
