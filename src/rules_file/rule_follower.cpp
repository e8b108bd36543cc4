// RuleFollower: keeps LimitCounters on a RuleStore's current version
// (include/limitcounter/rule_store.hpp).
#include <limitcounter/rule_store.hpp>

#include <algorithm>

#include <limitcounter/key_part.hpp>

namespace limitcounter {
namespace {

// The longest single XREAD block: a follower whose poll_interval is an hour still notices its
// destructor within this (plus command_timeout), while a notification ends any block at once.
constexpr std::chrono::milliseconds max_block{250};

std::chrono::milliseconds block_slice(std::chrono::milliseconds poll_interval) {
  return std::min(poll_interval, max_block);
}

// The follower's own connection: one connection, and a read timeout past the XREAD block so
// that a quiet stream is a nil reply, not a timeout that discards the connection.
Redis follower_redis(const RedisOptions& store_options, std::chrono::milliseconds poll_interval) {
  RedisOptions options = store_options;
  options.command_timeout = store_options.command_timeout + block_slice(poll_interval);
  options.pool_size = 1;
  return Redis(options);
}

RuleStore checked_store(RuleStore store, const RuleFollowerOptions& options) {
  if (options.poll_interval.count() <= 0) {
    throw Error(errc::invalid_argument,
                "rule follower of store " + detail::quote_for_message(store.name()) +
                    ": poll_interval " + std::to_string(options.poll_interval.count()) +
                    " ms (it must be > 0)");
  }
  return RuleStore(follower_redis(store.redis().options(), options.poll_interval), store.name(),
                   store.options());
}

} // namespace

RuleFollower::RuleFollower(RuleStore store, std::vector<std::shared_ptr<LimitCounter>> counters,
                           RuleFollowerOptions options)
    : store_(checked_store(std::move(store), options)), counters_(std::move(counters)),
      options_(std::move(options)) {
  for (std::size_t i = 0; i < counters_.size(); ++i) {
    if (!counters_[i]) {
      throw Error(errc::invalid_argument, "rule follower of store " +
                                              detail::quote_for_message(store_.name()) +
                                              ": counter " + std::to_string(i) + " is null");
    }
  }
  // The newest history entry first, then `current`: a put after this read is an entry after
  // `last_id_`, so the first XREAD returns at once instead of missing it.
  const Reply newest =
      Redis(store_.redis()).command({"XREVRANGE", store_.history_key(), "+", "-", "COUNT", "1"});
  last_id_ = newest.type() == Reply::Type::array && !newest.as_array().empty()
                 ? newest.at(0).at(0).as_string()
                 : "0-0";
  swap_if_newer();
  if (version_ == 0) {
    throw Error(errc::not_found,
                "rule follower: store " + detail::quote_for_message(store_.name()) +
                    " has no rule set stored yet",
                Outcome::failed);
  }
  thread_ = std::thread([this] { run(); });
}

RuleFollower::~RuleFollower() {
  {
    const std::lock_guard<std::mutex> lock(stop_mutex_);
    stop_ = true;
  }
  stop_changed_.notify_all();
  thread_.join(); // a blocked XREAD returns within its slice (max_block)
}

std::uint64_t RuleFollower::version() const { return version_; }

void RuleFollower::run() {
  using Steady = std::chrono::steady_clock;
  Steady::time_point next_poll = Steady::now() + options_.poll_interval;
  for (;;) {
    {
      const std::lock_guard<std::mutex> lock(stop_mutex_);
      if (stop_) {
        return;
      }
    }
    try {
      const auto until_poll =
          std::chrono::duration_cast<std::chrono::milliseconds>(next_poll - Steady::now());
      const bool notified = wait_for_change(until_poll);
      if (notified || Steady::now() >= next_poll) {
        // `current` decides either way, so a lost notification costs at most one
        // poll_interval and a burst of puts one load.
        swap_if_newer();
        next_poll = Steady::now() + options_.poll_interval;
      }
    } catch (const Error& e) {
      report(e);
      // Redis away: wait a slice (cut short by the destructor) instead of spinning.
      std::unique_lock<std::mutex> lock(stop_mutex_);
      stop_changed_.wait_for(lock, block_slice(options_.poll_interval), [this] { return stop_; });
    }
  }
}

bool RuleFollower::wait_for_change(std::chrono::milliseconds until_poll) {
  // Never 0 (XREAD BLOCK 0 waits forever), never past the slice (the destructor waits for it).
  const auto block =
      std::clamp(until_poll, std::chrono::milliseconds(1), block_slice(options_.poll_interval));
  const Reply reply = Redis(store_.redis())
                          .command({"XREAD", "BLOCK", std::to_string(block.count()), "STREAMS",
                                    store_.history_key(), last_id_});
  if (reply.is_error()) {
    throw Error(errc::server_error, reply.as_string(), Outcome::failed);
  }
  if (reply.is_nil()) {
    return false;
  }
  // [[key, [[id, fields], ...]]]: remember the newest entry read.
  const auto& entries = reply.at(0).at(1).as_array();
  if (entries.empty()) {
    return false;
  }
  last_id_ = entries.back().at(0).as_string();
  return true;
}

void RuleFollower::swap_if_newer() {
  const std::uint64_t current = store_.current_version();
  if (current <= version_ || current == skipped_) {
    return;
  }
  const auto stored = store_.get(current);
  if (!stored) {
    throw Error(errc::not_found,
                "rule follower: store " + detail::quote_for_message(store_.name()) +
                    " names version " + std::to_string(current) +
                    " as current but has no such version",
                Outcome::failed);
  }
  RuleSet rules;
  try {
    rules = RuleStore::parse(*stored);
  } catch (const Error&) {
    if (version_ != 0) {
      skipped_ = current; // reported once; the counters keep the version in force
    }
    throw;
  }
  for (const auto& counter : counters_) {
    counter->set_rules(rules, current);
  }
  version_ = current;
  if (options_.on_swap) {
    options_.on_swap(current);
  }
}

void RuleFollower::report(const Error& error) const {
  if (options_.on_error) {
    options_.on_error(error);
  }
}

} // namespace limitcounter
