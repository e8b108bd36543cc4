#include <limitcounter/red_packet.hpp>

#include <numeric>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/error.hpp>

#include "shared/amount.hpp"
#include "red_packets/red_packet_codec.hpp"

namespace limitcounter {
namespace {

std::string millis(TimePoint at) { return std::to_string(detail::unix_millis(at)); }

void validate_packet_id(const std::string& packet_id) {
  validate_key_part("red packet id", packet_id);
}

} // namespace

void RedPacketPool::check_partition(std::uint32_t partition) const {
  if (partition >= keys_.partitions()) {
    throw Error(errc::invalid_argument, "payout partition " + std::to_string(partition) +
                                            " is not below " + std::to_string(keys_.partitions()));
  }
}

RedPacketPool::RedPacketPool(Redis redis, RedPacketOptions options)
    : redis_(std::move(redis)), options_(std::move(options)),
      keys_(options_.key_prefix, options_.partitions) {
  if (options_.max_payout_attempts < 1) {
    throw Error(errc::invalid_argument, "max_payout_attempts " +
                                            std::to_string(options_.max_payout_attempts) +
                                            " must be at least 1");
  }
}

void RedPacketPool::create(const std::string& packet_id, const std::vector<std::int64_t>& amounts,
                           const PacketOptions& options) {
  validate_packet_id(packet_id);
  if (amounts.empty()) {
    throw Error(errc::invalid_argument, "red packet " + packet_id + " has no amounts");
  }
  std::int64_t total = 0;
  for (const std::int64_t amount : amounts) {
    detail::check_quantity("red packet " + packet_id + " amount", amount, true);
    total += amount;
    detail::check_quantity("red packet " + packet_id + " total", total, true);
  }
  if (options.expires_at <= Clock::now()) {
    throw Error(errc::invalid_argument, "red packet " + packet_id + " would expire in the past");
  }
  if (options.max_attempts_per_user < 1) {
    throw Error(errc::invalid_argument, "max_attempts_per_user " +
                                            std::to_string(options.max_attempts_per_user) +
                                            " must be at least 1");
  }
  std::vector<std::string> args{"create",
                                packet_id,
                                std::to_string(total),
                                millis(options.expires_at),
                                std::to_string(options.max_attempts_per_user),
                                millis(options.expires_at + options_.retention)};
  args.reserve(args.size() + amounts.size());
  for (const std::int64_t amount : amounts) {
    args.push_back(std::to_string(amount));
  }
  const Reply reply = redis_.eval(scripts::red_packet,
                                  {keys_.packet(packet_id, "meta"), keys_.packet(packet_id, "list"),
                                   keys_.packets(keys_.partition_of(packet_id))},
                                  args);
  const std::string& status = reply.at(0).as_string();
  if (status == "exists") {
    throw Error(errc::conflict, "red packet " + packet_id + " already exists", Outcome::failed);
  }
  if (status != "created") {
    throw Error(errc::protocol_error,
                "create of red packet " + packet_id + ": " + reply.debug_string(),
                Outcome::unknown);
  }
}

ScriptCall RedPacketPool::grab_call(const std::string& packet_id, const std::string& user_id,
                                    TimePoint now) const {
  validate_packet_id(packet_id);
  validate_key_part("red packet user id", user_id);
  const std::uint32_t partition = keys_.partition_of(packet_id);
  return {&scripts::red_packet,
          {keys_.packet(packet_id, "meta"), keys_.packet(packet_id, "list"),
           keys_.packet(packet_id, "drawn"), keys_.packet(packet_id, "attempts"),
           keys_.payout(partition, "ready"), keys_.payout(partition, "tasks")},
          {"grab", packet_id, user_id, millis(now)}};
}

GrabResult RedPacketPool::grab(const std::string& packet_id, const std::string& user_id,
                               TimePoint now) {
  const ScriptCall call = grab_call(packet_id, user_id, now);
  return detail::decode_grab(redis_.eval(*call.script, call.keys, call.args), packet_id);
}

std::vector<GrabResult> RedPacketPool::grab_many(const std::string& packet_id,
                                                 const std::vector<std::string>& user_ids,
                                                 TimePoint now) {
  std::vector<ScriptCall> calls;
  calls.reserve(user_ids.size());
  for (const auto& user_id : user_ids) {
    calls.push_back(grab_call(packet_id, user_id, now));
  }
  std::vector<GrabResult> results;
  results.reserve(user_ids.size());
  for (const Reply& reply : redis_.eval_pipeline(calls)) {
    if (reply.is_error()) {
      throw Error(errc::server_error, "grab of red packet " + packet_id + ": " + reply.as_string(),
                  Outcome::failed);
    }
    results.push_back(detail::decode_grab(reply, packet_id));
  }
  return results;
}

CloseResult RedPacketPool::close(const std::string& packet_id) {
  validate_packet_id(packet_id);
  const Reply reply = redis_.eval(scripts::red_packet,
                                  {keys_.packet(packet_id, "meta"), keys_.packet(packet_id, "list"),
                                   keys_.packets(keys_.partition_of(packet_id))},
                                  {"close", packet_id});
  const std::string& status = reply.at(0).as_string();
  CloseResult result;
  if (status == "closed") {
    result.closed_now = true;
    result.leftover = reply.at(1).to_int64();
    result.packets_left = reply.at(2).to_int64();
  } else if (status == "unknown") {
    throw Error(errc::not_found, "red packet \"" + packet_id + "\" does not exist",
                Outcome::failed);
  } else if (status != "already") {
    throw Error(errc::protocol_error,
                "close of red packet " + packet_id + ": " + reply.debug_string(), Outcome::unknown);
  }
  return result;
}

std::vector<std::pair<std::string, CloseResult>> RedPacketPool::close_expired(TimePoint now) {
  std::vector<std::pair<std::string, CloseResult>> closed;
  for (std::uint32_t partition = 0; partition < keys_.partitions(); ++partition) {
    const Reply expired = redis_.command(
        {"ZRANGEBYSCORE", keys_.packets(partition), "-inf", millis(now), "LIMIT", "0", "1000"});
    for (const Reply& id : expired.as_array()) {
      closed.emplace_back(id.as_string(), close(id.as_string()));
    }
  }
  return closed;
}

std::vector<PayoutTask> RedPacketPool::take_payouts(std::uint32_t partition, std::size_t max,
                                                    TimePoint now) {
  check_partition(partition);
  const Reply reply =
      redis_.eval(scripts::payout,
                  {keys_.payout(partition, "ready"), keys_.payout(partition, "inflight"),
                   keys_.payout(partition, "tasks"), keys_.payout(partition, "dead")},
                  {"take", millis(now), std::to_string(options_.visibility_timeout.count()),
                   std::to_string(max), std::to_string(options_.max_payout_attempts)});
  return detail::decode_take(reply, partition);
}

bool RedPacketPool::ack_payout(const PayoutTask& task, TimePoint now) {
  const Reply reply =
      redis_.eval(scripts::payout,
                  {keys_.payout(task.partition, "inflight"), keys_.payout(task.partition, "tasks"),
                   keys_.packet(task.packet_id, "paid")},
                  {"ack", task.idempotency_key(), std::to_string(task.lease), task.user_id,
                   millis(now), std::to_string(options_.retention.count())});
  return reply.at(0).as_string() == "paid";
}

bool RedPacketPool::fail_payout(const PayoutTask& task, TimePoint now) {
  const Reply reply =
      redis_.eval(scripts::payout,
                  {keys_.payout(task.partition, "ready"), keys_.payout(task.partition, "inflight"),
                   keys_.payout(task.partition, "tasks"), keys_.payout(task.partition, "dead")},
                  {"fail", task.idempotency_key(), std::to_string(task.lease), millis(now),
                   std::to_string(options_.max_payout_attempts),
                   std::to_string(options_.payout_backoff.count())});
  return reply.at(0).as_string() == "dead";
}

std::size_t RedPacketPool::run_payouts(const PayoutFunction& pay, std::size_t max) {
  std::size_t paid = 0;
  for (std::uint32_t partition = 0; partition < keys_.partitions(); ++partition) {
    for (const PayoutTask& task : take_payouts(partition, max)) {
      bool ok = false;
      try {
        ok = pay(task);
      } catch (...) {
        ok = false; // the host's failure is a failed attempt, retried later
      }
      if (ok) {
        paid += ack_payout(task) ? 1 : 0;
      } else {
        fail_payout(task);
      }
    }
  }
  return paid;
}

std::vector<std::string> RedPacketPool::dead_payouts(std::uint32_t partition) {
  check_partition(partition);
  std::vector<std::string> dead;
  const Reply reply = redis_.command({"LRANGE", keys_.payout(partition, "dead"), "0", "-1"});
  for (const Reply& item : reply.as_array()) {
    dead.push_back(item.as_string());
  }
  return dead;
}

} // namespace limitcounter
