#include "limit_counter/local_ledger.hpp"

#include <cmath>

namespace limitcounter::detail {

LocalLedger::LocalLedger(std::string node_id) : node_id_(std::move(node_id)) {}

void LocalLedger::drop_closed(TimePoint now) {
  for (auto it = counters_.begin(); it != counters_.end();) {
    it = it->second.expire_at <= now ? counters_.erase(it) : std::next(it);
  }
  for (auto it = reports_.begin(); it != reports_.end();) {
    it = it->second.expire_at <= now ? reports_.erase(it) : std::next(it);
  }
}

bool LocalLedger::try_take(const std::vector<LocalCounter>& counters, std::int64_t amount,
                           TimePoint now) {
  const std::lock_guard<std::mutex> lock(mutex_);
  drop_closed(now);
  const auto allowance = [](std::optional<std::int64_t> limit, double share) {
    return limit ? static_cast<std::int64_t>(std::floor(static_cast<double>(*limit) * share))
                 : INT64_MAX;
  };
  for (const auto& counter : counters) {
    const auto found = counters_.find({counter.key, counter.field});
    const Usage taken = found == counters_.end() ? Usage{} : found->second.taken;
    if (taken.count + 1 > allowance(counter.max_count, counter.share) ||
        taken.amount + amount > allowance(counter.max_amount, counter.share)) {
      return false;
    }
  }
  for (const auto& counter : counters) {
    Counter& entry = counters_[{counter.key, counter.field}];
    entry.reports_key = counter.reports_key;
    entry.expire_at = counter.expire_at;
    entry.taken.count += 1;
    entry.taken.amount += amount;
    entry.unreported.count += 1;
    entry.unreported.amount += amount;
  }
  idle_.store(false, std::memory_order_release);
  return true;
}

std::vector<LocalReport> LocalLedger::reports(TimePoint now) {
  const std::lock_guard<std::mutex> lock(mutex_);
  drop_closed(now);
  for (auto& [id, counter] : counters_) {
    if (counter.unreported == Usage{}) {
      continue;
    }
    std::string report_id = node_id_ + "-" + std::to_string(++next_report_);
    reports_.emplace(report_id, LocalReport{report_id, id.first, id.second, counter.reports_key,
                                            counter.expire_at, counter.unreported});
    counter.unreported = {};
  }
  std::vector<LocalReport> out;
  out.reserve(reports_.size());
  for (const auto& [id, report] : reports_) {
    out.push_back(report);
  }
  update_idle();
  return out;
}

void LocalLedger::reported(const std::vector<std::string>& report_ids) {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& id : report_ids) {
    reports_.erase(id);
  }
  update_idle();
}

void LocalLedger::update_idle() {
  bool idle = reports_.empty();
  for (auto it = counters_.begin(); idle && it != counters_.end(); ++it) {
    idle = it->second.unreported == Usage{};
  }
  idle_.store(idle, std::memory_order_release);
}

} // namespace limitcounter::detail
