#pragma once
// The simulated host: threads running random operations of every job through the fault
// proxy, each retried with the same ids until Redis answers (careful_host.hpp), and every
// answer recorded in the reference model.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <limitcounter/limitcounter.hpp>

#include "simulation/careful_host.hpp"
#include "simulation/reference_model.hpp"

namespace limitcounter::simulation {

/// The merchants, channels, users and limits the workload uses; the auditor reads them too.
struct Universe {
  std::vector<std::string> merchants{"m0", "m1", "m2", "m3"};
  std::vector<std::string> channels{"Ali", "Wx"};
  std::vector<std::string> wallet_users{"u0", "u1", "u2", "u3", "u4", "u5"};
  std::int64_t wallet_start = 50'000;
  std::int64_t merchant_max_count = 150;
  std::int64_t merchant_max_amount = 30'000;
  std::int64_t channel_max_amount = 120'000;
  std::int64_t single_max_amount = 700;
  /// All transactions are dated here, so that the windows never change during a run.
  TimePoint at = Clock::now();

  RuleSet rules() const;
};

/// The library objects of one run, all on the same Redis (through the proxy, or direct).
struct Jobs {
  Jobs(Redis redis, const std::string& prefix, const Universe& universe);
  Redis redis;
  WalletOptions wallet_options;
  LimitCounter limits;
  Wallet wallet;
  RedPacketPool pool;
};

/// What the workload did, for the report.
struct WorkloadStats {
  RetryStats retries;
  std::map<std::string, std::atomic<long>> operations; ///< by kind; keys fixed at start
  WorkloadStats();
  void count(const std::string& kind) { ++operations.at(kind); }
};

class Workload {
public:
  Workload(Jobs& jobs, const Universe& universe, ReferenceModel& model, WorkloadStats& stats,
           std::uint64_t seed, bool race_ids);

  /// Runs random operations on `threads` threads until `deadline`; then closes every packet
  /// still open. Returns when every thread has stopped.
  void run(int threads, std::chrono::steady_clock::time_point deadline);

private:
  class Thread;
  Jobs& jobs_;
  const Universe& universe_;
  ReferenceModel& model_;
  WorkloadStats& stats_;
  std::uint64_t seed_;
  bool race_ids_;
  std::mutex packets_mutex_;
  std::vector<std::string> open_packets_;
};

} // namespace limitcounter::simulation
