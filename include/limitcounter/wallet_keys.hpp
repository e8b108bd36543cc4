#pragma once
// Keys of the wallets. A user's keys share the hash tag of the user's journal
// partition, `{j<N>}`, so that one script can deduct and append the journal event.

#include <cstdint>
#include <string>
#include <string_view>

#include <limitcounter/keys.hpp>

namespace limitcounter {

/// `<prefix>{j<N>}:u:<user>` (account hash), `...:o:<user>:<order>` (order record),
/// `...:pending:<user>` (the user's unpersisted orders), `...:hw:<user>` (the user's
/// high-water mark: the newest journal version not yet persisted), and per partition N:
/// `<prefix>{j<N>}:journal` (stream) and `<prefix>{j<N>}:pending` (all unpersisted orders
/// as "<user>:<order>"), and per partition and consumer group G: `...:journal:held:G` (set of
/// ids read but held back behind an earlier event of their user), `...:journal:failures:G`
/// (hash: stream id -> failed attempts), `...:journal:dead:G` (dead-letter stream). Default
/// prefix `wallet:`.
class WalletKeys : public PartitionedKeys {
public:
  /// The prefix when none is given.
  static constexpr std::string_view default_prefix = "wallet:";

  /// Throws `Error` (invalid_argument) for a bad prefix or a partition count outside 1..1024.
  WalletKeys(std::string prefix, std::uint32_t partitions)
      : PartitionedKeys(std::move(prefix), partitions, 'j') {}

  /// The user's account hash (balance, threshold, version, updated, frozen). Every `user`,
  /// `order` and `group` given here must be a validated key part.
  std::string account(std::string_view user) const { return user_key(user, ":u:", {}); }
  /// The record of one order of the user (type, amount, result, state): a retry replays it.
  std::string order(std::string_view user, std::string_view order) const {
    return user_key(user, ":o:", order);
  }
  /// The user's orders not yet persisted: a sorted set, order -> time (ms).
  std::string user_pending(std::string_view user) const { return user_key(user, ":pending:", {}); }
  /// The user's high-water mark, a hash kept apart from the account so that it outlives a lost
  /// account: `version` (of the user's newest journal event) and `events` (those the
  /// persisting group has not acknowledged), `parked` (those of them it parked); deleted once
  /// `events` is 0. No load goes below its version, and none passes while `parked` is above 0.
  std::string high_water(std::string_view user) const { return user_key(user, ":hw:", {}); }
  /// The partition's journal stream.
  std::string journal(std::uint32_t partition) const { return key(partition, ":journal"); }
  /// The partition's unpersisted orders: a sorted set, "<user>:<order>" -> time (ms).
  std::string pending(std::uint32_t partition) const { return key(partition, ":pending"); }
  /// The ids the consumer group read but holds back behind an earlier event of their user.
  std::string journal_held(std::uint32_t partition, std::string_view group) const {
    return key(partition, std::string(":journal:held:").append(group));
  }
  /// The group's failed attempts per stream id (a hash).
  std::string journal_failures(std::uint32_t partition, std::string_view group) const {
    return key(partition, std::string(":journal:failures:").append(group));
  }
  /// The group's dead-letter stream.
  std::string dead_letters(std::uint32_t partition, std::string_view group) const {
    return key(partition, std::string(":journal:dead:").append(group));
  }

private:
  std::string user_key(std::string_view user, std::string_view kind, std::string_view order) const {
    std::string rest(kind);
    rest.append(user);
    if (!order.empty()) {
      rest.append(1, ':').append(order);
    }
    return key(partition_of(user), rest);
  }
};

} // namespace limitcounter
