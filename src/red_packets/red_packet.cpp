#include <limitcounter/red_packet.hpp>

#include <algorithm>
#include <iterator>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/error.hpp>

#include "red_packets/red_packet_codec.hpp"
#include "shared/amount.hpp"
#include "shared/batch.hpp"
#include "shared/observed.hpp"

namespace limitcounter {
namespace {

std::string millis(TimePoint at) { return std::to_string(detail::unix_millis(at)); }

void validate_packet_id(const std::string& packet_id) {
  validate_key_part("red packet id", packet_id);
}

// The observer's status words (see `LimitObserver::on_red_packet_operation`).
std::string_view status_word(const CreateResult& result) {
  return result.created_now ? "created" : "replayed";
}

std::string_view status_word(const GrabResult& result) {
  if (result.replayed) {
    return "replayed";
  }
  switch (result.status) {
  case GrabResult::Status::granted: return "granted";
  case GrabResult::Status::sold_out: return "sold_out";
  case GrabResult::Status::expired: return "expired";
  case GrabResult::Status::too_many_attempts: return "too_many_attempts";
  }
  return "other";
}

std::string_view status_word(const CloseResult& result) {
  return result.closed_now ? "closed" : "replayed";
}

// Reports one `op` call (or batch item) to `observer` (not null): its status, or "error".
auto report_to(LimitObserver* observer, RedPacketOp op) {
  return [observer, op](const auto* result, std::chrono::nanoseconds latency) {
    observer->on_red_packet_operation(op, result ? status_word(*result) : "error", latency);
  };
}

// `run()`, reported to `observer` (if any) as one `op` call.
template <typename Run> auto observed(LimitObserver* observer, RedPacketOp op, Run&& run) {
  return detail::observed_call(observer, std::forward<Run>(run), report_to(observer, op));
}

// `run()`, reported to `observer` (if any) as one payout-queue `op` call whose status and
// number of tasks `describe(result)` gives.
template <typename Run, typename Describe>
auto observed_payout(LimitObserver* observer, PayoutOp op, Run&& run, Describe&& describe) {
  return detail::observed_call(
      observer, std::forward<Run>(run), [&](const auto* result, std::chrono::nanoseconds latency) {
        const auto [status, tasks] =
            result ? describe(*result) : std::pair<std::string_view, std::size_t>("error", 0);
        observer->on_payout_operation(op, status, tasks, latency);
      });
}

// The payout script's reply word of an ack, fail or release, as the observer's status.
std::pair<std::string_view, std::size_t> describe_reply(const std::string& status) {
  return {status == "dead" ? std::string_view("dead_lettered") : std::string_view(status), 1};
}

// An ack, fail or release of a leased task (its op first in `arguments`): the payout script's
// status word. Resent with the same lease after a lost reply: the script answers a call of a
// lease that already ended as that lease's end (replayed, or what the fail counted).
std::string settle_payout(Redis& redis, LimitObserver* observer, PayoutOp op,
                          const std::vector<std::string>& keys,
                          const std::vector<std::string>& arguments) {
  return observed_payout(
      observer, op,
      [&] {
        return redis.eval(scripts::payout, keys, arguments, Resend::same_id).at(0).as_string();
      },
      describe_reply);
}

std::pair<std::string_view, std::size_t> describe_take(const std::vector<PayoutTask>& tasks) {
  return {"ok", tasks.size()};
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
  if (options_.payout_backoff.count() < 0) {
    throw Error(errc::invalid_argument, "red packet payout_backoff must not be negative (got " +
                                            std::to_string(options_.payout_backoff.count()) +
                                            " ms)");
  }
  // (a retention of 0 expires a packet's keys at its expiry, before close could return the
  // leftover; a visibility timeout of 0 hands a task being paid to the next worker at once)
  if (options_.retention.count() <= 0 || options_.visibility_timeout.count() <= 0) {
    throw Error(errc::invalid_argument,
                "red packet retention and visibility_timeout must be positive (got " +
                    std::to_string(options_.retention.count()) + " ms and " +
                    std::to_string(options_.visibility_timeout.count()) + " ms)");
  }
}

std::vector<std::string> RedPacketPool::packet_keys(const std::string& packet_id) const {
  return {keys_.packet(packet_id, "meta"), keys_.packet(packet_id, "list"),
          keys_.packets(keys_.partition_of(packet_id))};
}

CreateResult RedPacketPool::create(const std::string& packet_id,
                                   const std::vector<std::int64_t>& amounts,
                                   const PacketOptions& options) {
  return observed(options_.observer.get(), RedPacketOp::create,
                  [&] { return run_create(packet_id, amounts, options); });
}

CreateResult RedPacketPool::run_create(const std::string& packet_id,
                                       const std::vector<std::int64_t>& amounts,
                                       const PacketOptions& options) {
  validate_packet_id(packet_id);
  if (amounts.empty()) {
    throw Error(errc::invalid_argument, "red packet " + packet_id + " has no amounts");
  }
  if (amounts.size() > static_cast<std::size_t>(max_red_packet_amounts)) {
    throw Error(errc::invalid_argument,
                "red packet " + packet_id + " has " + std::to_string(amounts.size()) +
                    " amounts, more than " + std::to_string(max_red_packet_amounts));
  }
  std::int64_t total = 0;
  for (const std::int64_t amount : amounts) {
    detail::check_quantity("red packet " + packet_id + " amount", amount, true);
    total += amount;
    detail::check_quantity("red packet " + packet_id + " total", total, true);
  }
  if (options.max_attempts_per_user < 1) {
    throw Error(errc::invalid_argument, "max_attempts_per_user " +
                                            std::to_string(options.max_attempts_per_user) +
                                            " must be at least 1");
  }
  const std::string expires = millis(options.expires_at);
  const std::string digest =
      detail::content_digest(amounts, expires, options.max_attempts_per_user);
  const std::size_t chunks = (amounts.size() + chunk_amounts - 1) / chunk_amounts;
  const std::vector<std::string> keys = packet_keys(packet_id);
  const auto conflict = [&packet_id] {
    return Error(errc::conflict,
                 "red packet " + packet_id + " already exists with other amounts or options",
                 Outcome::failed);
  };
  const auto unexpected = [&packet_id](const Reply& reply) {
    return Error(errc::protocol_error,
                 "create of red packet " + packet_id + ": " + reply.debug_string(),
                 Outcome::unknown);
  };

  // The meta (with the digest) first, without amounts: a retry learns here which chunks are
  // stored, so it sends only the missing ones, and a complete packet costs one round trip.
  // A past expiry is refused by the script, not here: only a new packet is refused, while a
  // create retried after its expiry (its reply was lost) replays, and finishes what was cut off.
  const std::string now = millis(Clock::now());
  const Reply begun = redis_.eval(
      scripts::red_packet, keys,
      {"begin", packet_id, std::to_string(total), std::to_string(amounts.size()), expires,
       std::to_string(options.max_attempts_per_user),
       millis(options.expires_at + options_.retention), digest, std::to_string(chunks), now},
      Resend::same_id);
  const std::string& begin_status = begun.at(0).as_string();
  if (begin_status == "conflict") {
    throw conflict();
  }
  if (begin_status == "past") {
    throw Error(errc::invalid_argument,
                "red packet " + packet_id + " would expire in the past (expires_at " + expires +
                    " ms, now " + now + " ms); nothing was written",
                Outcome::failed);
  }
  if (begin_status != "begun" && begin_status != "exists") {
    throw unexpected(begun);
  }
  CreateResult result;
  result.replayed = begin_status == "exists";
  auto next = static_cast<std::size_t>(begun.at(1).to_int64());
  bool ready = begun.at(2).to_int64() == 1;
  // Each round stores a chunk or learns a later `next`; a concurrent create of the same
  // content may store some chunks meanwhile. The bound only guards against a broken server.
  for (std::size_t round = 0; !ready; ++round) {
    if (next >= chunks || round > 2 * chunks) {
      throw Error(errc::protocol_error,
                  "create of red packet " + packet_id + " did not complete: next chunk " +
                      std::to_string(next) + " of " + std::to_string(chunks),
                  Outcome::unknown);
    }
    const std::size_t first = next * chunk_amounts;
    const std::size_t last = std::min(amounts.size(), first + chunk_amounts);
    std::vector<std::string> args{"chunk", packet_id, digest, std::to_string(next)};
    args.reserve(args.size() + last - first);
    for (std::size_t i = first; i < last; ++i) {
      args.push_back(std::to_string(amounts[i]));
    }
    const Reply reply = redis_.eval(scripts::red_packet, keys, args, Resend::same_id);
    const std::string& status = reply.at(0).as_string();
    if (status == "conflict") {
      throw conflict();
    }
    if (status == "unknown") {
      throw Error(errc::not_found,
                  "red packet " + packet_id + " expired while it was being created",
                  Outcome::failed);
    }
    if (status != "stored" && status != "have" && status != "gap") {
      throw unexpected(reply);
    }
    next = static_cast<std::size_t>(reply.at(1).to_int64());
    ready = status != "gap" && reply.at(2).to_int64() == 1;
    if (status == "stored") {
      ++result.chunks_stored;
      result.created_now = ready;
    }
  }
  return result;
}

ScriptCall RedPacketPool::grab_call(const std::string& packet_id, const GrabRequest& request,
                                    TimePoint now) const {
  validate_packet_id(packet_id);
  validate_key_part("red packet user id", request.user_id);
  detail::validate_display(request.display);
  const std::uint32_t partition = keys_.partition_of(packet_id);
  return {
      &scripts::red_packet,
      {keys_.packet(packet_id, "meta"), keys_.packet(packet_id, "list"),
       keys_.packet(packet_id, "drawn"), keys_.packet(packet_id, "attempts"),
       keys_.payout(partition, "ready"), keys_.payout(partition, "tasks")},
      {"grab", packet_id, request.user_id, millis(now), detail::encode_display(request.display)},
      Resend::same_id};
}

GrabResult RedPacketPool::grab(const std::string& packet_id, const std::string& user_id,
                               TimePoint now) {
  return grab(packet_id, user_id, UserDisplay{}, now);
}

GrabResult RedPacketPool::grab(const std::string& packet_id, const std::string& user_id,
                               const UserDisplay& display, TimePoint now) {
  return observed(options_.observer.get(), RedPacketOp::grab, [&] {
    const ScriptCall call = grab_call(packet_id, GrabRequest{user_id, display}, now);
    return detail::decode_grab(redis_.eval(*call.script, call.keys, call.args, call.resend),
                               packet_id);
  });
}

std::vector<BatchResult<GrabResult>>
RedPacketPool::grab_many(const std::string& packet_id, const std::vector<std::string>& user_ids,
                         TimePoint now) {
  std::vector<GrabRequest> requests;
  requests.reserve(user_ids.size());
  for (const auto& user_id : user_ids) {
    requests.push_back({user_id, {}});
  }
  return grab_many(packet_id, requests, now);
}

std::vector<BatchResult<GrabResult>>
RedPacketPool::grab_many(const std::string& packet_id, const std::vector<GrabRequest>& requests,
                         TimePoint now) {
  LimitObserver* observer = options_.observer.get();
  return detail::observed_batch_call<GrabResult>(
      observer,
      [&] {
        std::vector<ScriptCall> calls;
        calls.reserve(requests.size());
        for (const auto& request : requests) {
          calls.push_back(grab_call(packet_id, request, now)); // bad input throws before sending
        }
        return detail::run_batch<GrabResult>(redis_, calls,
                                             [&packet_id](std::size_t, const Reply& reply) {
                                               return detail::decode_grab(reply, packet_id);
                                             });
      },
      report_to(observer, RedPacketOp::grab_many));
}

CloseResult RedPacketPool::close(const std::string& packet_id) {
  return observed(options_.observer.get(), RedPacketOp::close, [&] {
    validate_packet_id(packet_id);
    return detail::decode_close(redis_.eval(scripts::red_packet, packet_keys(packet_id),
                                            {"close", packet_id}, Resend::same_id),
                                packet_id);
  });
}

std::vector<std::pair<std::string, CloseResult>> RedPacketPool::close_expired(TimePoint now) {
  std::vector<std::pair<std::string, CloseResult>> closed;
  const std::string until = millis(now);
  for (std::uint32_t partition = 0; partition < keys_.partitions(); ++partition) {
    // Each page is read from the start of the index again: every close answered (closed,
    // already, not ready, unknown) drops its id from the index, so the next page holds the
    // packets not yet met, and a short page is the last.
    for (std::size_t page_size = close_page; page_size == close_page;) {
      const Reply page = redis_.command({"ZRANGEBYSCORE", keys_.packets(partition), "-inf", until,
                                         "LIMIT", "0", std::to_string(close_page)});
      page_size = page.as_array().size();
      for (const Reply& id : page.as_array()) {
        CloseResult result;
        try {
          result = close(id.as_string());
        } catch (const Error& e) {
          if (e.code() != errc::not_found) {
            throw;
          }
          // Its keys outlived their retention (or an id of theirs is being created anew):
          // the close script dropped the id from the index. The others are still closed.
          result.gone = true;
        }
        closed.emplace_back(id.as_string(), result);
      }
    }
  }
  return closed;
}

std::vector<PayoutTask> RedPacketPool::take_payouts(std::uint32_t partition, std::size_t max,
                                                    TimePoint now) {
  return observed_payout(
      options_.observer.get(), PayoutOp::take,
      [&] {
        check_partition(partition);
        const Reply reply =
            redis_.eval(scripts::payout,
                        {keys_.payout(partition, "ready"), keys_.payout(partition, "inflight"),
                         keys_.payout(partition, "tasks"), keys_.payout(partition, "dead")},
                        {"take", millis(now), std::to_string(options_.visibility_timeout.count()),
                         std::to_string(max), std::to_string(options_.max_payout_attempts)});
        return detail::decode_take(reply, partition);
      },
      describe_take);
}

bool RedPacketPool::ack_payout(const PayoutTask& task, TimePoint now) {
  check_partition(task.partition);
  const std::string status =
      settle_payout(redis_, options_.observer.get(), PayoutOp::ack,
                    {keys_.payout(task.partition, "inflight"),
                     keys_.payout(task.partition, "tasks"), keys_.packet(task.packet_id, "paid")},
                    {"ack", task.idempotency_key(), std::to_string(task.lease), task.user_id,
                     millis(now), std::to_string(options_.retention.count())});
  return status == "paid" || status == "replayed"; // (or stale)
}

bool RedPacketPool::fail_payout(const PayoutTask& task, TimePoint now) {
  check_partition(task.partition);
  const std::string status = settle_payout(
      redis_, options_.observer.get(), PayoutOp::fail,
      {keys_.payout(task.partition, "ready"), keys_.payout(task.partition, "inflight"),
       keys_.payout(task.partition, "tasks"), keys_.payout(task.partition, "dead")},
      {"fail", task.idempotency_key(), std::to_string(task.lease), millis(now),
       std::to_string(options_.max_payout_attempts),
       std::to_string(options_.payout_backoff.count())});
  return status == "dead"; // (or retry, stale)
}

bool RedPacketPool::release_payout(const PayoutTask& task, TimePoint now) {
  check_partition(task.partition);
  const std::string status = settle_payout(
      redis_, options_.observer.get(), PayoutOp::release,
      {keys_.payout(task.partition, "ready"), keys_.payout(task.partition, "inflight"),
       keys_.payout(task.partition, "tasks")},
      {"release", task.idempotency_key(), std::to_string(task.lease), millis(now)});
  return status == "released" || status == "replayed"; // (or stale)
}

std::size_t RedPacketPool::run_payouts(const PayoutFunction& pay, std::size_t max) {
  std::size_t paid = 0;
  for (std::uint32_t partition = 0; partition < keys_.partitions(); ++partition) {
    const std::vector<PayoutTask> tasks = take_payouts(partition, max);
    for (auto task = tasks.begin(); task != tasks.end(); ++task) {
      bool ok = false;
      try {
        ok = pay(*task);
      } catch (...) {
        ok = false; // the host's failure is a failed attempt, retried later
      }
      try {
        if (ok) {
          paid += ack_payout(*task) ? 1 : 0;
        } else {
          fail_payout(*task);
        }
      } catch (...) {
        // Left leased, the tasks not tried would each count a failed attempt at their
        // deadline. Every release goes to the same partition's keys, so once one throws the
        // others would too, each after the resends: those keep their deadline.
        try {
          std::for_each(std::next(task), tasks.end(),
                        [this](const PayoutTask& untried) { release_payout(untried); });
        } catch (...) {
        }
        throw;
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
