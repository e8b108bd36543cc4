#pragma once
// A result's status and `replayed` together, so that one comparison states both facts
// (`CHECK(outcome(limits.cancel(id)) == std::pair(CancelResult::Status::cancelled, true))`).

#include <utility>

namespace limitcounter::testing {

template <typename Result> auto outcome(const Result& result) {
  return std::make_pair(result.status, result.replayed);
}

} // namespace limitcounter::testing
