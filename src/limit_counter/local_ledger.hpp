#pragma once
// What this node allowed on its own while Redis could not answer (FailurePolicy::local):
// bounded by each rule's local share of a window, across any number of outages in that
// window, and added to the Redis counters once Redis answers, exactly once: every report
// carries an id that Redis records with the counter, so a report re-sent after a lost
// reply adds nothing.

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <limitcounter/calendar.hpp>
#include <limitcounter/usage.hpp>

namespace limitcounter::detail {

/// One counter a locally decided transaction would move.
struct LocalCounter {
  std::string key;         ///< the window hash
  std::string field;       ///< the dimension
  std::string reports_key; ///< where Redis records the ids of reports to `key` (same slot)
  TimePoint expire_at;     ///< the window's end plus grace: after it the allowance is moot
  std::optional<std::int64_t> max_count;
  std::optional<std::int64_t> max_amount;
  double share = 0;
};

/// Usage of one counter allowed locally and not yet known to be in Redis, under a fixed id.
struct LocalReport {
  std::string id; ///< "<node id>-<sequence>": unique per process and report
  std::string key;
  std::string field;
  std::string reports_key;
  TimePoint expire_at;
  Usage usage;
};

class LocalLedger {
public:
  /// `node_id` makes report ids unique across the processes of a fleet.
  explicit LocalLedger(std::string node_id);

  /// Counts `amount` in every counter if each stays within its share of its limits for the
  /// whole window (what was allowed in earlier outages of the window counts); else counts
  /// nothing. Returns whether it counted.
  bool try_take(const std::vector<LocalCounter>& counters, std::int64_t amount, TimePoint now);

  /// The reports to send: usage taken since the last call becomes new reports with fresh ids;
  /// reports sent before and not known to have arrived come again with their first id (a
  /// re-sent report is recognised by Redis). Reports of windows closed at `now` are dropped.
  std::vector<LocalReport> reports(TimePoint now);
  /// Redis recorded these reports (added now or before): they are not sent again.
  void reported(const std::vector<std::string>& report_ids);
  /// True when nothing waits to be reported. Lock-free: asked on every decision.
  bool empty() const noexcept { return idle_.load(std::memory_order_acquire); }

private:
  struct Counter {
    std::string reports_key;
    TimePoint expire_at;
    Usage taken;      ///< allowed locally in this window, in all outages
    Usage unreported; ///< part of `taken` in no report yet
  };
  void drop_closed(TimePoint now);
  /// Sets `idle_`; the caller holds `mutex_`.
  void update_idle();

  std::string node_id_;
  mutable std::mutex mutex_;
  std::uint64_t next_report_ = 0;
  std::map<std::pair<std::string, std::string>, Counter> counters_;
  std::map<std::string, LocalReport> reports_;
  std::atomic<bool> idle_{true};
};

} // namespace limitcounter::detail
