#include "simulation/workload.hpp"

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>
#include <variant>

namespace limitcounter::simulation {
namespace {

const char* const operation_kinds[] = {"consume", "consume_many", "reserve", "confirm",  "cancel",
                                       "refund",  "race",         "deduct",  "credit",   "rollback",
                                       "create",  "grab",         "close",   "abandoned"};

} // namespace

RuleSet Universe::rules() const {
  return RuleSet()
      .add(Rule("single").where("merchant").per_transaction().max_amount(single_max_amount))
      .add(Rule("merchant-day")
               .where("merchant")
               .per(Period::day)
               .max_count(merchant_max_count)
               .max_amount(merchant_max_amount))
      .add(Rule("channel-day").where("channel").per(Period::day).max_amount(channel_max_amount));
}

namespace {

LimitCounterOptions limit_options(const std::string& prefix) {
  LimitCounterOptions options;
  options.key_prefix = prefix + "lim:";
  return options;
}

WalletOptions wallet_options_of(const std::string& prefix) {
  WalletOptions options;
  options.key_prefix = prefix + "wal:";
  options.partitions = 4;
  return options;
}

RedPacketOptions packet_options(const std::string& prefix) {
  RedPacketOptions options;
  options.key_prefix = prefix + "rp:";
  options.partitions = 4;
  return options;
}

} // namespace

Jobs::Jobs(Redis redis_in, const std::string& prefix, const Universe& universe)
    : redis(std::move(redis_in)), wallet_options(wallet_options_of(prefix)),
      limits(redis, Calendar("UTC"), limit_options(prefix)),
      wallet(redis, wallet_options,
             [start = universe.wallet_start](const std::string&) {
               return std::optional<AccountSnapshot>(AccountSnapshot{start, 1, 0});
             }),
      pool(redis, packet_options(prefix)) {
  limits.set_rules(universe.rules());
}

WorkloadStats::WorkloadStats() {
  for (const char* kind : operation_kinds) {
    operations[kind];
  }
}

// One worker: its own random stream (seed + index), its own ids, and its own
// transactions and orders to refund, confirm or roll back later.
class Workload::Thread {
public:
  Thread(Workload& workload, int index)
      : w_(workload), index_(index), random_(workload.seed_ + static_cast<std::uint64_t>(index)) {}

  void run(std::chrono::steady_clock::time_point deadline) {
    while (std::chrono::steady_clock::now() < deadline) {
      try {
        step();
      } catch (const Error& e) {
        // a caller error where the host did everything right, or retries that never end
        w_.model_.violation(std::string("thread ") + std::to_string(index_) + ": " + e.what());
      }
    }
  }

private:
  void step() {
    {
      const int dice = pick(0, 99);
      if (dice < 19) {
        consume();
      } else if (dice < 25) {
        consume_many();
      } else if (dice < 33) {
        reserve_then_end();
      } else if (dice < 41) {
        refund();
      } else if (dice < 43 && w_.race_ids_) {
        race();
      } else if (dice < 60) {
        deduct();
      } else if (dice < 66) {
        credit();
      } else if (dice < 71) {
        rollback();
      } else if (dice < 75) {
        create_packet();
      } else if (dice < 95) {
        grab();
      } else {
        close_packet();
      }
    }
  }

  struct Order {
    std::string user;
    std::string id;
    std::int64_t amount;
  };

  int pick(int low, int high) { return std::uniform_int_distribution<int>(low, high)(random_); }
  template <typename T> const T& any_of(const std::vector<T>& items) {
    return items[static_cast<std::size_t>(pick(0, static_cast<int>(items.size()) - 1))];
  }
  std::string next_id(const char* kind) {
    return std::string(kind) + std::to_string(index_) + "-" + std::to_string(++sequence_);
  }
  template <typename Call> auto definitely(Call&& call) {
    return call_until_definite(w_.stats_.retries, std::forward<Call>(call));
  }

  Transaction payment(std::string id) {
    Transaction tx;
    tx.id = std::move(id);
    tx.attributes = {{"merchant", any_of(w_.universe_.merchants)},
                     {"channel", any_of(w_.universe_.channels)}};
    tx.amount = pick(1, static_cast<int>(w_.universe_.single_max_amount) + 100);
    tx.time = w_.universe_.at;
    return tx;
  }

  // An allowed decision must leave every window within its limits.
  void check_limits(const Transaction& tx, const Decision& decision) {
    if (decision.verdict == Decision::Verdict::cancelled) {
      // the sweep abandoned it while this host was retrying (cluster): nothing counts
      w_.stats_.count("abandoned");
      if (!decision.replayed || decision.denial) {
        w_.model_.violation("abandoned " + tx.id + " is not a replay, or names a denial");
      }
      return;
    }
    if (!decision.allowed()) {
      if (!decision.denial) {
        w_.model_.violation("denied " + tx.id + " names no denial");
      }
      return;
    }
    for (const auto& rule : decision.rules) {
      if ((rule.max_count && rule.used.count > *rule.max_count) ||
          (rule.max_amount && rule.used.amount > *rule.max_amount)) {
        w_.model_.violation("allowed " + tx.id + " leaves " + rule.rule + " at " +
                            std::to_string(rule.used.count) + ":" +
                            std::to_string(rule.used.amount));
      }
    }
  }

  void record(const Transaction& tx, const Decision& decision, bool reservation) {
    LimitRecord entry;
    entry.merchant = tx.attributes.at("merchant");
    entry.channel = tx.attributes.at("channel");
    entry.amount = tx.amount;
    entry.allowed = decision.allowed();
    entry.reservation = reservation;
    const std::lock_guard<std::mutex> lock(w_.model_.mutex);
    w_.model_.transactions[tx.id] = entry;
  }

  void consume() {
    w_.stats_.count("consume");
    const Transaction tx = payment(next_id("L"));
    const Decision decision = definitely([&] { return w_.jobs_.limits.consume(tx); });
    check_limits(tx, decision);
    record(tx, decision, false);
    if (decision.allowed()) {
      consumed_.push_back(tx.id);
    }
  }

  // A few payments in one consume_many. An item that ended without a definite answer is sent
  // again with the same id in the next batch, as a careful host does; a caller error is a
  // finding.
  void consume_many() {
    w_.stats_.count("consume_many");
    std::vector<Transaction> pending;
    for (int i = pick(2, 6); i > 0; --i) {
      pending.push_back(payment(next_id("B")));
    }
    for (int attempt = 1; !pending.empty(); ++attempt) {
      const auto results = definitely([&] { return w_.jobs_.limits.consume_many(pending); });
      std::vector<Transaction> again;
      for (std::size_t i = 0; i < results.size(); ++i) {
        const Transaction& tx = pending[i];
        if (const auto* decision = std::get_if<Decision>(&results[i])) {
          check_limits(tx, *decision);
          record(tx, *decision, false);
          if (decision->allowed()) {
            consumed_.push_back(tx.id);
          }
          continue;
        }
        const Error& error = std::get<Error>(results[i]);
        if (error.is_input_error() || attempt >= 400) {
          w_.model_.violation("consume_many of " + tx.id + ": " + error.what());
          continue;
        }
        ++w_.stats_.retries.retries;
        if (error.outcome() == Outcome::unknown) {
          ++w_.stats_.retries.unknown_outcomes;
        }
        again.push_back(tx);
      }
      pending = std::move(again);
      if (!pending.empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds{attempt < 10 ? 2 : 20});
      }
    }
  }

  void reserve_then_end() {
    w_.stats_.count("reserve");
    const Transaction tx = payment(next_id("R"));
    const Decision decision = definitely([&] { return w_.jobs_.limits.reserve(tx); });
    check_limits(tx, decision);
    record(tx, decision, true);
    if (!decision.allowed()) {
      return;
    }
    if (pick(0, 1) == 0) {
      w_.stats_.count("confirm");
      const std::int64_t final_amount = pick(1, static_cast<int>(tx.amount));
      const ConfirmResult confirmed =
          definitely([&] { return w_.jobs_.limits.confirm(tx.id, final_amount); });
      if (confirmed.amount != final_amount) {
        w_.model_.violation("confirm of " + tx.id + " at " + std::to_string(final_amount) +
                            " says " + std::to_string(confirmed.amount));
      }
      const std::lock_guard<std::mutex> lock(w_.model_.mutex);
      auto& entry = w_.model_.transactions[tx.id];
      entry.confirmed = true;
      entry.amount = final_amount;
    } else {
      w_.stats_.count("cancel");
      const CancelResult cancelled = definitely([&] { return w_.jobs_.limits.cancel(tx.id); });
      if (cancelled.status == CancelResult::Status::recorded_unknown) {
        w_.model_.violation("cancel of reserved " + tx.id + " found it unknown");
      }
      const std::lock_guard<std::mutex> lock(w_.model_.mutex);
      w_.model_.transactions[tx.id].cancelled = true;
    }
  }

  void refund() {
    if (consumed_.empty()) {
      return;
    }
    w_.stats_.count("refund");
    const std::size_t at =
        static_cast<std::size_t>(pick(0, static_cast<int>(consumed_.size()) - 1));
    const std::string id = consumed_[at];
    std::int64_t refundable = 0;
    {
      const std::lock_guard<std::mutex> lock(w_.model_.mutex);
      const auto& entry = w_.model_.transactions[id];
      refundable = entry.amount - entry.refunded;
    }
    const bool full = refundable <= 1 || pick(0, 2) == 0;
    const std::int64_t amount = full ? refundable : pick(1, static_cast<int>(refundable - 1));
    const std::string refund_id = next_id("F");
    const RefundResult result = definitely([&] {
      return full ? w_.jobs_.limits.refund(id) : w_.jobs_.limits.refund(id, amount, refund_id);
    });
    if (result.refunded_now != amount) {
      w_.model_.violation("refund of " + std::to_string(amount) + " from " + id + " gave " +
                          std::to_string(result.refunded_now));
    }
    const std::lock_guard<std::mutex> lock(w_.model_.mutex);
    auto& entry = w_.model_.transactions[id];
    entry.refunded += result.refunded_now;
    if (full) {
      entry.count_refunded = true;
      consumed_.erase(consumed_.begin() + static_cast<std::ptrdiff_t>(at));
    }
  }

  // Several callers decide one id at the same moment: exactly one may be told it was first.
  void race() {
    w_.stats_.count("race");
    const Transaction tx = payment(next_id("X"));
    std::atomic<int> first{0};
    std::vector<Decision> decisions(4);
    std::vector<std::thread> callers;
    for (std::size_t i = 0; i < decisions.size(); ++i) {
      callers.emplace_back([&, i] {
        decisions[i] = definitely([&] { return w_.jobs_.limits.consume(tx); });
        first += decisions[i].replayed ? 0 : 1;
      });
    }
    for (auto& caller : callers) {
      caller.join();
    }
    for (const auto& decision : decisions) {
      if (decision.allowed() != decisions.front().allowed()) {
        w_.model_.violation("callers of " + tx.id + " were told different verdicts");
      }
    }
    check_limits(tx, decisions.front());
    record(tx, decisions.front(), false);
    const std::lock_guard<std::mutex> lock(w_.model_.mutex);
    w_.model_.first_callers[tx.id] = first;
  }

  void wallet_change(bool is_deduct) {
    w_.stats_.count(is_deduct ? "deduct" : "credit");
    const Order order{any_of(w_.universe_.wallet_users), next_id("W"), pick(1, 3000)};
    const WalletResult result = definitely([&] {
      return is_deduct ? w_.jobs_.wallet.deduct(order.user, order.id, order.amount)
                       : w_.jobs_.wallet.credit(order.user, order.id, order.amount);
    });
    if (result.status != WalletResult::Status::ok) {
      return;
    }
    if (result.balance < 0) {
      w_.model_.violation("order " + order.id + " left " + order.user + " at " +
                          std::to_string(result.balance));
    }
    if (is_deduct) {
      orders_.push_back(order); // a rollback reverses a deduction
    }
    const std::lock_guard<std::mutex> lock(w_.model_.mutex);
    w_.model_.wallet_delta[order.user] += is_deduct ? -order.amount : order.amount;
    ++w_.model_.wallet_changes[order.user];
  }
  void deduct() { wallet_change(true); }
  void credit() { wallet_change(false); }

  void rollback() {
    if (orders_.empty()) {
      return;
    }
    w_.stats_.count("rollback");
    const std::size_t at = static_cast<std::size_t>(pick(0, static_cast<int>(orders_.size()) - 1));
    const Order order = orders_[at];
    orders_.erase(orders_.begin() + static_cast<std::ptrdiff_t>(at));
    const RollbackResult result =
        definitely([&] { return w_.jobs_.wallet.rollback(order.user, order.id); });
    if (result.status == RollbackResult::Status::recorded_unknown) {
      w_.model_.violation("rollback of " + order.id + " found it unknown");
      return;
    }
    const std::lock_guard<std::mutex> lock(w_.model_.mutex);
    w_.model_.wallet_delta[order.user] += order.amount;
    ++w_.model_.wallet_changes[order.user];
  }

  void create_packet() {
    w_.stats_.count("create");
    const std::string id = next_id("P");
    const int count = pick(3, 20);
    const std::int64_t total = std::int64_t{count} * pick(50, 300);
    const auto amounts = split(total, count);
    PacketOptions options;
    options.expires_at = Clock::now() + std::chrono::hours{1};
    definitely([&] { return w_.jobs_.pool.create(id, amounts, options); });
    {
      const std::lock_guard<std::mutex> lock(w_.model_.mutex);
      w_.model_.packets[id].total = total;
    }
    const std::lock_guard<std::mutex> lock(w_.packets_mutex_);
    w_.open_packets_.push_back(id);
  }

  std::string open_packet(bool take_it) {
    const std::lock_guard<std::mutex> lock(w_.packets_mutex_);
    if (w_.open_packets_.empty()) {
      return {};
    }
    const std::size_t at =
        static_cast<std::size_t>(pick(0, static_cast<int>(w_.open_packets_.size()) - 1));
    std::string id = w_.open_packets_[at];
    if (take_it) {
      w_.open_packets_.erase(w_.open_packets_.begin() + static_cast<std::ptrdiff_t>(at));
    }
    return id;
  }

  void grab() {
    const std::string packet = open_packet(false);
    if (packet.empty()) {
      return;
    }
    w_.stats_.count("grab");
    const std::string user = "g" + std::to_string(pick(0, 29));
    const GrabResult result = definitely([&] { return w_.jobs_.pool.grab(packet, user); });
    if (result.status != GrabResult::Status::granted) {
      return;
    }
    const std::lock_guard<std::mutex> lock(w_.model_.mutex);
    auto& grants = w_.model_.packets[packet].grants;
    const auto [found, inserted] = grants.emplace(user, result.amount);
    if (!inserted && found->second != result.amount) {
      w_.model_.violations.push_back(user + " got " + std::to_string(found->second) + " and " +
                                     std::to_string(result.amount) + " from " + packet);
    }
  }

public:
  void close_packet(std::string packet = {}) {
    if (packet.empty()) {
      packet = open_packet(true);
    }
    if (packet.empty()) {
      return;
    }
    w_.stats_.count("close");
    const CloseResult result = definitely([&] { return w_.jobs_.pool.close(packet); });
    const std::lock_guard<std::mutex> lock(w_.model_.mutex);
    auto& entry = w_.model_.packets[packet];
    if (entry.closed && entry.leftover != result.leftover) {
      w_.model_.violations.push_back(packet + " closed with " + std::to_string(entry.leftover) +
                                     " and " + std::to_string(result.leftover) + " left");
    }
    entry.closed = true;
    entry.leftover = result.leftover;
  }

private:
  Workload& w_;
  int index_;
  std::mt19937_64 random_;
  long sequence_ = 0;
  std::vector<std::string> consumed_;
  std::vector<Order> orders_;
};

Workload::Workload(Jobs& jobs, const Universe& universe, ReferenceModel& model,
                   WorkloadStats& stats, std::uint64_t seed, bool race_ids)
    : jobs_(jobs), universe_(universe), model_(model), stats_(stats), seed_(seed),
      race_ids_(race_ids) {
  for (const auto& user : universe.wallet_users) {
    jobs_.wallet.load(user, {universe.wallet_start, 1, 0});
    model_.wallet_start[user] = universe.wallet_start;
  }
}

void Workload::run(int threads, std::chrono::steady_clock::time_point deadline) {
  std::vector<std::thread> workers;
  for (int i = 0; i < threads; ++i) {
    workers.emplace_back([this, i, deadline] { Thread(*this, i).run(deadline); });
  }
  for (auto& worker : workers) {
    worker.join();
  }
  Thread closer(*this, threads);
  std::vector<std::string> still_open;
  {
    const std::lock_guard<std::mutex> lock(packets_mutex_);
    still_open.swap(open_packets_);
  }
  for (const auto& packet : still_open) {
    closer.close_packet(packet);
  }
}

} // namespace limitcounter::simulation
