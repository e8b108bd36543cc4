#include "limit_counter/local_ledger.hpp"

#include <cmath>

namespace limitcounter::detail {

bool LocalLedger::try_take(const std::vector<LocalCounter>& counters, std::int64_t amount,
                           TimePoint now) {
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto allowance = [](std::optional<std::int64_t> limit, double share) {
    return limit ? static_cast<std::int64_t>(std::floor(static_cast<double>(*limit) * share))
                 : INT64_MAX;
  };
  for (const auto& counter : counters) {
    const auto found = entries_.find({counter.key, counter.field});
    const Usage used =
        found == entries_.end() || found->second.expire_at <= now ? Usage{} : found->second.usage;
    if (used.count + 1 > allowance(counter.max_count, counter.share) ||
        used.amount + amount > allowance(counter.max_amount, counter.share)) {
      return false;
    }
  }
  for (const auto& counter : counters) {
    Entry& entry = entries_[{counter.key, counter.field}];
    if (entry.key.empty() || entry.expire_at <= now) {
      entry = Entry{counter.key, counter.field, counter.expire_at, {}};
    }
    entry.usage.count += 1;
    entry.usage.amount += amount;
  }
  return true;
}

std::vector<LocalLedger::Entry> LocalLedger::take_all(TimePoint now) {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Entry> open;
  for (auto& [id, entry] : entries_) {
    if (entry.expire_at > now && entry.usage != Usage{}) {
      open.push_back(std::move(entry));
    }
  }
  entries_.clear();
  return open;
}

void LocalLedger::restore(const std::vector<Entry>& entries) {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& entry : entries) {
    Entry& existing = entries_[{entry.key, entry.field}];
    if (existing.key.empty()) {
      existing = entry;
    } else {
      existing.usage.count += entry.usage.count;
      existing.usage.amount += entry.usage.amount;
    }
  }
}

bool LocalLedger::empty() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return entries_.empty();
}

} // namespace limitcounter::detail
