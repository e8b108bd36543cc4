#pragma once
// JournalLag: how far a consumer group of the wallet journal is behind, per partition
// (`JournalConsumer::lag`, `LimitObserver::on_journal_lag`).

#include <cstdint>
#include <optional>
#include <string>

namespace limitcounter {

/// Where one consumer group stands in one journal partition, as Redis counts it (`XINFO
/// GROUPS`): events written but not yet read by the group, and events read but not yet
/// acknowledged. Together they are the partition's events not yet persisted by the group
/// (dead-lettered events are acknowledged: they count in neither).
struct JournalLag {
  std::string group;           ///< the consumer group (`JournalConsumerOptions::group`)
  std::uint32_t partition = 0; ///< the journal partition
  /// Events not yet delivered to any consumer of the group (Redis's `lag`). All the events
  /// of the partition's stream if the group was not created yet (the first `read` creates
  /// it, from the start of the stream); 0 if the stream does not exist. Empty when Redis
  /// cannot tell: an entry after the group's last read one was deleted (XDEL) while older
  /// entries stay (the library never deletes journal entries; an operator may).
  std::optional<std::int64_t> unread;
  /// Events delivered to a consumer of the group and not acknowledged yet (Redis's
  /// `pending`): in a handler now, failed and waiting for their retry, or held back behind
  /// an earlier event of their user.
  std::int64_t pending = 0;
};

} // namespace limitcounter
