#include <limitcounter/decision.hpp>

namespace limitcounter {

std::string_view to_string(Metric metric) noexcept {
  switch (metric) {
  case Metric::count: return "count";
  case Metric::amount: return "amount";
  case Metric::single_amount: return "single_amount";
  case Metric::unavailable: return "unavailable";
  }
  return "unknown";
}

} // namespace limitcounter
