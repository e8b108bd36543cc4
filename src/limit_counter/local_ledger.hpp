#pragma once
// What this node allowed on its own while Redis could not answer (FailurePolicy::local):
// bounded by each rule's local share, and added to the Redis counters once Redis answers.

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
  std::string key;
  std::string field;
  TimePoint expire_at; ///< the window's end plus grace: after it the allowance is moot
  std::optional<std::int64_t> max_count;
  std::optional<std::int64_t> max_amount;
  double share = 0;
};

class LocalLedger {
public:
  /// Counts `amount` in every counter if each stays within its share of its limits; else
  /// counts nothing. Returns whether it counted.
  bool try_take(const std::vector<LocalCounter>& counters, std::int64_t amount, TimePoint now);

  struct Entry {
    std::string key;
    std::string field;
    TimePoint expire_at;
    Usage usage;
  };
  /// Removes and returns what is to be reported (windows still open at `now`).
  std::vector<Entry> take_all(TimePoint now);
  /// Puts entries back (their report failed).
  void restore(const std::vector<Entry>& entries);
  bool empty() const;

private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, Entry> entries_;
};

} // namespace limitcounter::detail
