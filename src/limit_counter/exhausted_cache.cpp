#include "limit_counter/exhausted_cache.hpp"

#include <algorithm>

#include <limitcounter/error.hpp>

namespace limitcounter::detail {

ExhaustedPlace exhausted_place(const std::string& rule, std::string_view window_id,
                               std::string_view field, TimePoint window_end) {
  // Rule names, window ids and fields are key parts: none holds a newline.
  std::string key;
  key.reserve(rule.size() + window_id.size() + field.size() + 2);
  key.append(rule).append(1, '\n').append(window_id).append(1, '\n').append(field);
  return {rule, std::move(key), window_end};
}

std::shared_ptr<ExhaustedCache> ExhaustedCache::make(const ExhaustedCacheOptions& options) {
  if (!options.enabled) {
    return nullptr;
  }
  if (options.max_staleness.count() <= 0) {
    throw Error(errc::invalid_argument, "exhausted_cache.max_staleness " +
                                            std::to_string(options.max_staleness.count()) +
                                            " ms must be positive");
  }
  if (options.max_entries == 0) {
    throw Error(errc::invalid_argument, "exhausted_cache.max_entries 0 must be at least 1");
  }
  return std::make_shared<ExhaustedCache>(options.max_staleness, options.max_entries);
}

std::uint64_t ExhaustedCache::generation() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return generation_;
}

bool ExhaustedCache::holding(const std::string& key, TimePoint wall_now) const {
  if (wall_now < holds_overflow_) {
    return true;
  }
  const auto hold = holds_.find(key);
  return hold != holds_.end() && wall_now < hold->second;
}

void ExhaustedCache::erase(std::unordered_map<std::string, Entry>::iterator entry) {
  order_.erase(entry->second.order);
  entries_.erase(entry);
}

std::optional<Denial> ExhaustedCache::lookup(const std::vector<ExhaustedPlace>& places,
                                             const std::string& id, std::int64_t amount,
                                             TimePoint at, TimePoint wall_now, SteadyTime now) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (entries_.empty() || unsettled_at_.count(id) != 0) {
    return std::nullopt;
  }
  for (const auto& place : places) {
    const auto entry = entries_.find(place.key);
    if (entry == entries_.end()) {
      continue;
    }
    if (entry->second.stale_at <= now || entry->second.window_end <= at ||
        holding(place.key, wall_now)) {
      erase(entry);
      continue;
    }
    const Denial& full = entry->second.denial;
    // What Redis would deny given the `used` it reported, which can only have grown since.
    const std::int64_t requested = full.metric == Metric::count ? 1 : amount;
    if (full.used + requested > full.limit) {
      return Denial{full.rule, full.metric, full.limit, full.used, requested};
    }
  }
  return std::nullopt;
}

void ExhaustedCache::remember(const ExhaustedPlace& place, const Denial& denial,
                              std::uint64_t generation, TimePoint wall_now, SteadyTime now) {
  if (denial.metric != Metric::count && denial.metric != Metric::amount) {
    return;
  }
  const std::lock_guard<std::mutex> lock(mutex_);
  if (generation != generation_ || holding(place.key, wall_now)) {
    return;
  }
  auto entry = entries_.find(place.key);
  if (entry != entries_.end()) {
    order_.erase(entry->second.order);
  } else {
    if (entries_.size() >= max_entries_) {
      erase(entries_.find(order_.front()));
    }
    entry = entries_.emplace(place.key, Entry{}).first;
  }
  entry->second.denial = denial;
  entry->second.window_end = place.window_end;
  entry->second.stale_at = now + max_staleness_;
  entry->second.order = order_.insert(order_.end(), place.key);
}

void ExhaustedCache::note_hold(const std::vector<ExhaustedPlace>& places, TimePoint hold_end,
                               TimePoint wall_now) {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& place : places) {
    const auto entry = entries_.find(place.key);
    if (entry != entries_.end()) {
      erase(entry);
    }
    if (holds_.size() >= max_entries_ && holds_.count(place.key) == 0) {
      for (auto hold = holds_.begin(); hold != holds_.end();) {
        hold = hold->second <= wall_now ? holds_.erase(hold) : std::next(hold);
      }
    }
    if (holds_.size() >= max_entries_ && holds_.count(place.key) == 0) {
      // Still full of live holds: forget one, and keep nothing until it could have expired.
      holds_overflow_ = std::max(holds_overflow_, holds_.begin()->second);
      holds_.erase(holds_.begin());
    }
    TimePoint& until = holds_[place.key];
    until = std::max(until, hold_end);
  }
}

void ExhaustedCache::unsettled(const std::string& id) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (unsettled_at_.count(id) != 0) {
    return;
  }
  if (unsettled_.size() >= max_entries_) {
    unsettled_at_.erase(unsettled_.front());
    unsettled_.pop_front();
  }
  unsettled_at_.emplace(id, unsettled_.insert(unsettled_.end(), id));
}

void ExhaustedCache::settled(const std::string& id) {
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto found = unsettled_at_.find(id);
  if (found != unsettled_at_.end()) {
    unsettled_.erase(found->second);
    unsettled_at_.erase(found);
  }
}

void ExhaustedCache::clear() {
  const std::lock_guard<std::mutex> lock(mutex_);
  ++generation_;
  entries_.clear();
  order_.clear();
}

std::size_t ExhaustedCache::size() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

} // namespace limitcounter::detail
