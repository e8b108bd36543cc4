#pragma once
// Which shares a transaction has on a Redis Cluster: its window rules grouped by the slot their
// counters live in. Pure; the same for a decision and for a refund that brings the original.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <limitcounter/keys.hpp>
#include <limitcounter/rule.hpp>
#include <limitcounter/transaction.hpp>

namespace limitcounter::detail {

/// How much longer a share's record lives than its home record. Each master expires keys by its
/// own clock: a share record gone before its home record would let a retried refund, replayed at
/// the home record, give back again in that share (recorded anew from the original). Masters
/// whose clocks differ by less than this cannot.
constexpr std::chrono::hours share_record_margin{1};

/// A share's void (lua/limit.lua op void) at `now` of the transaction of `fingerprint`
/// ("<fp>:<amount>", as its home record keeps it): a share without a record keeps a tombstone as long as a share's record would
/// live, so that its decision sent late (delayed in the network past the sweep that abandoned
/// its transaction) counts nothing; a share record of another fingerprint (the id used again
/// while this share outlived its home record) is left alone.
std::vector<std::string> void_share(std::chrono::system_clock::time_point now,
                                    std::chrono::milliseconds replay_horizon,
                                    const std::string& fingerprint);

/// One share: the rules whose counters live in `slot`, and the counter tag of the first of them
/// (its share record's key is in that tag's slot).
struct SharePlan {
  std::uint16_t slot = 0;
  std::string tag;
  std::vector<const Rule*> rules;
};

/// The shares of `transaction` under `window_rules` (validated and matched), in the order of
/// the first rule of each slot.
std::vector<SharePlan> share_plans(const CounterKeys& keys, const Transaction& transaction,
                                   const std::vector<const Rule*>& window_rules);

/// A home record's plan: its shares' counter tags (or any lines), one a line.
std::string joined_lines(const std::vector<std::string>& lines);

} // namespace limitcounter::detail
