// The sweep of a Redis Cluster: finishes the fan-outs of transactions spread over several slots
// that nobody retried. A home record (lua/transaction_home.lua) says when its shares may not all
// have followed it (its open mark `o`, set by the change itself, so the hot path pays nothing
// for it) and when it was begun; the sweep SCANs every master for this counter's home records, lets
// the script pick those old enough (by the server's clock), brings their shares to the home
// record's state with the same idempotent share operations a retry sends, and only then closes the
// home record. A sweep that dies half way leaves the record open for the next one.
#include "limit_counter/limit_counter_impl.hpp"

#include <algorithm>

#include <limitcounter/detail/lua_scripts.hpp>

#include "limit_counter/codec/reply_status.hpp"
#include "limit_counter/codec/reversals.hpp"
#include "limit_counter/share_plan.hpp"
#include "redis/cluster_protocol.hpp"
#include "shared/amount.hpp"

namespace limitcounter {
namespace {

// SCAN's MATCH is a glob: a prefix may contain its special characters.
std::string glob_escaped(std::string_view text) {
  std::string escaped;
  for (const char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') {
      escaped += '\\';
    }
    escaped += c;
  }
  return escaped;
}

// The host of a cluster seed "host:port" or "[v6]:port", for a CLUSTER SLOTS entry without one.
std::string seed_host(const std::string& seed) {
  std::string host = seed.substr(0, seed.rfind(':'));
  if (host.size() > 1 && host.front() == '[') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

// The options of one master: the cluster's settings, that node only.
std::vector<RedisOptions> master_options(Redis& redis) {
  const RedisOptions& cluster = redis.options();
  std::vector<RedisOptions> masters;
  for (const auto& range : detail::parse_cluster_slots(redis.command({"CLUSTER", "SLOTS"}),
                                                       seed_host(cluster.cluster_seeds.front()))) {
    const bool known = std::any_of(masters.begin(), masters.end(), [&](const RedisOptions& o) {
      return o.host == range.host && o.port == range.port;
    });
    if (!known) {
      RedisOptions node = cluster;
      node.cluster_seeds.clear();
      node.host = range.host;
      node.port = range.port;
      node.pool_size = 1;
      masters.push_back(std::move(node));
    }
  }
  return masters;
}

// Whether a share's reply to a sweep operation says it changed the share.
bool changed(const Reply& reply) {
  using detail::ReplyStatus;
  const ReplyStatus status = detail::reply_status(reply);
  if (status == ReplyStatus::refunded) {
    return reply.at(4).as_string() == "0";
  }
  return status == ReplyStatus::voided || status == ReplyStatus::confirmed ||
         status == ReplyStatus::expired || status == ReplyStatus::cancelled;
}

} // namespace

std::vector<InterruptedFanOut>
LimitCounter::Impl::finish_interrupted(std::chrono::seconds older_than, std::size_t max) {
  // in ms, a number the script holds exactly
  constexpr std::chrono::seconds longest{9'007'199'254'740};
  if (older_than.count() < 0 || older_than > longest) {
    throw Error(errc::invalid_argument, "finish_interrupted: older_than " +
                                            std::to_string(older_than.count()) +
                                            "s is not in [0, 2^53 ms)");
  }
  if (max == 0) {
    throw Error(errc::invalid_argument, "finish_interrupted: max 0 would finish nothing");
  }
  std::vector<InterruptedFanOut> done;
  if (!redis_.is_cluster()) {
    return done;
  }
  const std::vector<std::string> take{
      "sweep", std::to_string(std::chrono::milliseconds(older_than).count())};
  // Every key of a transaction id's slot: home records, and the records of transactions
  // without window rules, which the script answers "none".
  const std::string pattern = glob_escaped(keys_.prefix()) + "tx:*";
  for (const RedisOptions& master : master_options(redis_)) {
    Redis node(master);
    std::string cursor = "0";
    do {
      const Reply page =
          node.command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}, Resend::same_id);
      if (page.is_error()) {
        throw Error(errc::server_error, "finish_interrupted: SCAN: " + page.as_string(),
                    Outcome::failed);
      }
      cursor = page.at(0).as_string();
      const auto& keys = page.at(1).as_array();
      // Taking a pending record abandons it: take no more than may still be reported.
      for (std::size_t next = 0; next < keys.size() && done.size() < max;) {
        std::vector<ScriptCall> calls;
        for (; next < keys.size() && calls.size() < max - done.size(); ++next) {
          // (taking a record again hands over what the first take did: a lost reply is resent)
          calls.push_back(
              {&scripts::transaction_home, {keys[next].as_string()}, take, Resend::same_id});
        }
        const std::vector<Reply> taken = redis_.eval_pipeline(calls);
        for (std::size_t i = 0; i < taken.size(); ++i) {
          if (taken[i].is_error()) {
            throw Error(errc::server_error, "finish_interrupted: " + taken[i].as_string(),
                        Outcome::failed);
          }
          if (auto finished = follow_home(calls[i].keys.front(), taken[i])) {
            done.push_back(std::move(*finished));
          }
        }
      }
    } while (cursor != "0" && done.size() < max);
    if (done.size() >= max) {
      break;
    }
  }
  return done;
}

// `taken` is the home record's answer to "sweep": {"none"}, or {"follow", state, plan, open,
// amount, fingerprint, refunds...}. Runs on every share what a retry of the transaction's last
// change would run there, then closes the home record.
std::optional<InterruptedFanOut> LimitCounter::Impl::follow_home(const std::string& home_key,
                                                                 const Reply& taken) {
  if (detail::reply_status(taken) != detail::ReplyStatus::follow) {
    return std::nullopt;
  }
  const auto& items = taken.as_array();
  InterruptedFanOut result;
  const std::string tag_start = keys_.prefix() + "tx:{";
  result.transaction_id = home_key.substr(tag_start.size(), home_key.size() - tag_start.size() - 1);
  result.state = detail::transaction_state(taken.at(1).as_string(), "home record " + home_key);
  result.abandoned = result.state == TransactionState::voided;
  const std::string& amount = taken.at(4).as_string();
  std::vector<std::vector<std::string>> operations;
  if (result.state == TransactionState::voided || result.state == TransactionState::denied) {
    operations.push_back(
        detail::void_share(Clock::now(), options_.replay_horizon, taken.at(5).as_string()));
  } else if (result.state == TransactionState::cancelled) {
    const auto now = Clock::now();
    operations.push_back({"cancel", std::to_string(detail::unix_millis(now)),
                          std::to_string(detail::unix_millis(now + options_.replay_horizon)),
                          "probe"});
  } else if (result.state == TransactionState::expired) {
    operations.push_back(detail::expire_share()); // shares hold a grace longer than the home
  } else if (result.state == TransactionState::confirmed) {
    operations.push_back({"confirm", amount, "0"});
  }
  for (std::size_t i = 6; i + 1 < items.size(); i += 2) {
    operations.push_back({"refund", items[i].as_string(), items[i + 1].as_string()});
  }
  const std::vector<std::string> plan =
      share_records(result.transaction_id, taken.at(2).as_string());
  if (!operations.empty()) {
    const std::vector<Reply> replies = run_on_shares(plan, operations);
    for (std::size_t share = 0; share < plan.size(); ++share) {
      bool lost = false;
      bool without_record = false;
      for (std::size_t k = 0; k < operations.size(); ++k) {
        const Reply& reply = replies[share * operations.size() + k];
        result.shares_changed += changed(reply) ? 1 : 0;
        // (a share that expired under any other state gave back what the home gave back)
        lost = lost || (result.state == TransactionState::confirmed && detail::lost_hold(reply));
        // (a refund without the original makes no record: only the host's retry with it can)
        without_record =
            without_record || (operations[k].front() == "refund" &&
                               detail::reply_status(reply) == detail::ReplyStatus::unknown);
      }
      result.shares_lost += lost ? 1 : 0;
      result.shares_without_record += without_record ? 1 : 0;
    }
  }
  if (result.shares_lost > 0 || result.shares_without_record > 0) {
    return result; // left open: reported by every sweep (see InterruptedFanOut)
  }
  run_home(result.transaction_id, {"swept", taken.at(3).as_string()});
  if (!result.abandoned && result.shares_changed == 0) {
    return std::nullopt; // every share had followed already
  }
  return result;
}

} // namespace limitcounter
