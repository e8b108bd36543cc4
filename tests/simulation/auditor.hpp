#pragma once
// After a run: every invariant of every job, checked against Redis itself (read through a
// direct connection, no faults) and the reference model.

#include <string>
#include <vector>

#include <limitcounter/limitcounter.hpp>

#include "simulation/reference_model.hpp"
#include "simulation/workload.hpp"

namespace limitcounter::simulation {

struct AuditReport {
  long checks = 0;                   ///< invariants checked (each comparison counts)
  std::vector<std::string> failures; ///< what broke, with the values
};

/// `direct` are the jobs on a direct connection; every key that matches one of
/// `expiring_key_patterns` on one of `nodes` (each master, standalone: the server) must
/// carry a TTL. Drains the journal and the payout queue to check them.
AuditReport audit(Jobs& direct, const Universe& universe, ReferenceModel& model,
                  const std::vector<Redis>& nodes,
                  const std::vector<std::string>& expiring_key_patterns);

} // namespace limitcounter::simulation
