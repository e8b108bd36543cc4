#pragma once
// What the simulated host was told, recorded as it was told: the auditor compares Redis
// with it after the run. Shared by the workload threads (one mutex; the calls it records
// take far longer than the lock).

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace limitcounter::simulation {

/// One limits transaction, by its id.
struct LimitRecord {
  std::string merchant;
  std::string channel;
  std::int64_t amount = 0; ///< consumed, or held by a reservation
  bool allowed = false;
  bool reservation = false;
  bool confirmed = false;      ///< reservations: confirmed at `amount` (the final amount)
  bool cancelled = false;      ///< reservations: cancelled
  std::int64_t refunded = 0;   ///< consumed transactions: given back so far
  bool count_refunded = false; ///< a full refund took its count back
};

/// One red packet.
struct PacketRecord {
  std::int64_t total = 0;
  std::map<std::string, std::int64_t> grants; ///< user -> amount
  bool closed = false;
  std::int64_t leftover = 0;
};

class ReferenceModel {
public:
  std::mutex mutex;
  std::map<std::string, LimitRecord> transactions;
  /// Ids that several callers decided at once: how many were told "first" (not replayed).
  std::map<std::string, int> first_callers;
  std::map<std::string, std::int64_t> wallet_start; ///< user -> loaded balance
  std::map<std::string, std::int64_t> wallet_delta; ///< user -> sum of changes
  std::map<std::string, long> wallet_changes;       ///< user -> journal events owed
  std::map<std::string, PacketRecord> packets;
  /// Broken promises seen during the run (a decision past its limit, two amounts for one
  /// grab, ...), with what was seen.
  std::vector<std::string> violations;

  void violation(std::string what) {
    const std::lock_guard<std::mutex> lock(mutex);
    violations.push_back(std::move(what));
  }
};

} // namespace limitcounter::simulation
