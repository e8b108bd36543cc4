#pragma once
// JournalConsumer: the persister's reader of the wallet journal. At-least-once: an event
// is acknowledged (and its pending entries cleared) only after the host's handler
// returned; events of a consumer that died are claimed by another after an idle time.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <limitcounter/calendar.hpp>
#include <limitcounter/redis.hpp>
#include <limitcounter/wallet.hpp>

namespace limitcounter {

/// One journal event.
struct JournalEvent {
  /// Stable across deliveries: "<partition>/<stream id>". Use it (or type + order) to make
  /// the database write idempotent.
  std::string id;
  std::uint32_t partition = 0;
  std::string stream_id;
  std::string type; ///< "deduct", "credit" or "rollback"
  std::string user;
  std::string order;
  std::int64_t amount = 0;
  std::int64_t balance = 0; ///< after the change
  std::int64_t version = 0;
  TimePoint time;
};

/// Settings of a JournalConsumer.
struct JournalConsumerOptions {
  std::string group = "persister";
  std::string consumer = "persister-1"; ///< unique per process
  std::size_t batch = 100;              ///< events per partition per poll
  /// Events another consumer read but did not acknowledge for this long are taken over.
  std::chrono::milliseconds claim_idle{std::chrono::seconds{30}};
};

class JournalConsumer {
public:
  /// `wallet` must use the same prefix and partitions as the wallets writing the journal.
  JournalConsumer(Redis redis, const WalletOptions& wallet, JournalConsumerOptions options = {});

  /// The host's persister: write the events to the database. If it throws, nothing is
  /// acknowledged and the events come again (to this consumer after claim_idle).
  using Handler = std::function<void(const std::vector<JournalEvent>&)>;

  /// One pass over every partition: reads a batch (claimed idle events first), hands it
  /// to `handle`, then acknowledges it and clears its pending entries. Returns how many
  /// events were handled. Non-blocking: call it in a loop.
  std::size_t poll(const Handler& handle);

  /// Reads one batch of `partition` without acknowledging it (for hosts that ack later).
  std::vector<JournalEvent> read(std::uint32_t partition);
  /// Acknowledges events read from one partition.
  void acknowledge(std::uint32_t partition, const std::vector<JournalEvent>& events);

private:
  Redis redis_;
  WalletKeys keys_;
  JournalConsumerOptions options_;
};

} // namespace limitcounter
