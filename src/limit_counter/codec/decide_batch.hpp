#pragma once
// Many consumes' decide calls of lua/limit.lua joined into one call of its op batch. Pure;
// unit-tested without a server.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace limitcounter::detail {

/// The most transactions one batch call decides: the script runs this long without another
/// client getting a turn (~64 x 5 us here).
constexpr std::size_t max_decide_batch = 64;

/// Decide calls of consume, joined into one call of lua/limit.lua's op batch: one header (the
/// latest call's `now` and record expiry: a consume queued behind a stalled call is decided at
/// its own time or later, so a hold that expired before it was made never denies it, and every
/// record keeps at least its own replay horizon), each distinct rule program and each distinct
/// counter set once, then every transaction's own values (counter set number when there are
/// several sets, fingerprint, amount, fields) as one MessagePack array of strings.
class DecideBatch {
public:
  /// Adds the call `keys`, `args` (as `build_decide` made them, op consume).
  void add(std::vector<std::string>&& keys, std::vector<std::string>&& args);
  /// How many calls were added since the last `take`.
  std::size_t size() const noexcept { return size_; }
  /// The batch call's KEYS and ARGV; the batch is empty again after.
  std::pair<std::vector<std::string>, std::vector<std::string>> take();

private:
  struct CounterSet {
    std::size_t program = 0; // index into programs_
    std::string name;
    std::string text;
    std::vector<std::string> keys; // the set's key, then its counters' and its hold sets'
  };
  std::size_t size_ = 0;
  std::vector<std::string> header_;                           // now, record expiry, hold expiry
  std::vector<std::pair<std::string, std::string>> programs_; // numbers, names
  std::vector<CounterSet> sets_;
  std::vector<std::size_t> transaction_sets_; // index into sets_, per transaction
  std::vector<std::string> transactions_;     // fingerprint, amount, fields, per transaction
  std::vector<std::string> records_;
};

} // namespace limitcounter::detail
