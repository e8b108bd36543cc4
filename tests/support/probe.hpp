#pragma once
// Helpers shared by the connection-level tests.

#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/error.hpp>

namespace limitcounter::testing {

/// counter_add: a real embedded script with a simple contract, used as a probe call.
inline const Script& probe = scripts::counter_add;

/// Arguments of one probe call: count 1, amount 10 into field "f", expiring in 2100.
inline std::vector<std::string> probe_args() { return {"f", "1", "10", "4102444800000"}; }

/// The limitcounter::Error `action` throws; fails the test if it throws none.
template <typename Action> Error error_of(Action&& action) {
  try {
    action();
  } catch (const Error& e) {
    return e;
  }
  FAIL("no error");
  throw std::logic_error("unreachable");
}

} // namespace limitcounter::testing
