#include "simulation/auditor.hpp"

#include <climits>
#include <map>

namespace limitcounter::simulation {
namespace {

std::string usage_text(const Usage& usage) {
  return std::to_string(usage.count) + ":" + std::to_string(usage.amount);
}

class Audit {
public:
  Audit(Jobs& direct, const Universe& universe, ReferenceModel& model)
      : direct_(direct), universe_(universe), model_(model) {}

  void expect(bool holds, const std::string& what) {
    ++report_.checks;
    if (!holds) {
      report_.failures.push_back(what);
    }
  }

  // One counter of the day: it holds `expected` and stays within `limit` (count, amount).
  void counter(const std::string& name, const std::string& dimension, const Usage& expected,
               const Usage& limit) {
    const Usage stored =
        direct_.limits.usage(name, Dimension{dimension}, Period::day, universe_.at);
    expect(stored == expected, name + " " + dimension + " counter is " + usage_text(stored) +
                                   ", the decisions add up to " + usage_text(expected));
    expect(stored.count <= limit.count && stored.amount <= limit.amount,
           name + " " + dimension + " passed its limit: " + usage_text(stored));
  }

  // Each counter equals what the host was told was allowed, less what was refunded or
  // released, and stays within its limits.
  void limits() {
    std::map<std::string, Usage> merchants;
    std::map<std::string, Usage> channels;
    for (const auto& [id, tx] : model_.transactions) {
      if (!tx.allowed || tx.cancelled) {
        continue;
      }
      const Usage counted{tx.count_refunded ? 0 : 1, tx.amount - tx.refunded};
      for (auto* totals : {&merchants[tx.merchant], &channels[tx.channel]}) {
        totals->count += counted.count;
        totals->amount += counted.amount;
      }
    }
    for (const auto& merchant : universe_.merchants) {
      counter("merchant", merchant, merchants[merchant],
              Usage{universe_.merchant_max_count, universe_.merchant_max_amount});
    }
    for (const auto& channel : universe_.channels) {
      counter("channel", channel, channels[channel],
              Usage{INT64_MAX, universe_.channel_max_amount});
    }
    for (const auto& [id, first] : model_.first_callers) {
      expect(first <= 1, id + " had " + std::to_string(first) + " first callers");
    }
  }

  // Each balance equals loaded + changes, never below the threshold, one journal event per
  // change.
  void wallets() {
    std::map<std::string, long> events;
    JournalConsumer journal(direct_.redis, direct_.wallet_options);
    for (int quiet = 0; quiet < 3;) {
      const std::size_t handled = journal.poll([&](const std::vector<JournalEvent>& batch) {
        for (const auto& event : batch) {
          ++events[event.user];
        }
      });
      quiet = handled == 0 ? quiet + 1 : 0;
    }
    for (const auto& user : universe_.wallet_users) {
      const auto account = direct_.wallet.account(user);
      const std::int64_t expected = model_.wallet_start[user] + model_.wallet_delta[user];
      expect(account.has_value(), "wallet " + user + " is gone");
      if (!account) {
        continue;
      }
      expect(account->balance == expected, "wallet " + user + " holds " +
                                               std::to_string(account->balance) + ", expected " +
                                               std::to_string(expected));
      expect(account->balance >= account->threshold,
             "wallet " + user + " is below its threshold: " + std::to_string(account->balance));
      expect(events[user] == model_.wallet_changes[user],
             "wallet " + user + " has " + std::to_string(events[user]) + " journal events for " +
                 std::to_string(model_.wallet_changes[user]) + " changes");
    }
  }

  // Granted + leftover == total for each packet, one amount per user, each grant paid once.
  void red_packets() {
    std::map<std::string, std::int64_t> paid;
    for (int quiet = 0; quiet < 3;) {
      const std::size_t done = direct_.pool.run_payouts(
          [&](const PayoutTask& task) {
            const auto [at, inserted] = paid.emplace(task.idempotency_key(), task.amount);
            expect(inserted || at->second == task.amount,
                   "payout " + task.idempotency_key() + " came with two amounts");
            return true;
          },
          1000);
      quiet = done == 0 ? quiet + 1 : 0;
    }
    std::size_t grants = 0;
    for (const auto& [id, packet] : model_.packets) {
      std::int64_t granted = 0;
      for (const auto& [user, amount] : packet.grants) {
        granted += amount;
        ++grants;
        const auto at = paid.find(id + ":" + user);
        expect(at != paid.end() && at->second == amount,
               "grant of " + std::to_string(amount) + " to " + user + " from " + id +
                   (at == paid.end() ? " was never paid" : " was paid wrong"));
      }
      expect(packet.closed, id + " was never closed");
      expect(granted + packet.leftover == packet.total,
             id + ": granted " + std::to_string(granted) + " + leftover " +
                 std::to_string(packet.leftover) + " != total " + std::to_string(packet.total));
    }
    expect(paid.size() == grants,
           std::to_string(paid.size()) + " payouts for " + std::to_string(grants) + " grants");
  }

  void expiring_keys(const std::vector<Redis>& nodes, const std::vector<std::string>& patterns) {
    for (const auto& node : nodes) {
      Redis redis = node;
      for (const auto& pattern : patterns) {
        const Reply keys = redis.command({"KEYS", pattern});
        for (const auto& key : keys.as_array()) {
          const std::int64_t ttl = redis.command({"PTTL", key.as_string()}).as_integer();
          expect(ttl > 0, key.as_string() + " has no TTL (" + std::to_string(ttl) + ")");
        }
      }
    }
  }

  AuditReport finish() {
    for (const auto& violation : model_.violations) {
      report_.failures.push_back("during the run: " + violation);
    }
    report_.checks += static_cast<long>(model_.violations.size());
    return std::move(report_);
  }

private:
  Jobs& direct_;
  const Universe& universe_;
  ReferenceModel& model_;
  AuditReport report_;
};

} // namespace

AuditReport audit(Jobs& direct, const Universe& universe, ReferenceModel& model,
                  const std::vector<Redis>& nodes,
                  const std::vector<std::string>& expiring_key_patterns) {
  const std::lock_guard<std::mutex> lock(model.mutex);
  Audit audit(direct, universe, model);
  audit.limits();
  audit.wallets();
  audit.red_packets();
  audit.expiring_keys(nodes, expiring_key_patterns);
  return audit.finish();
}

} // namespace limitcounter::simulation
