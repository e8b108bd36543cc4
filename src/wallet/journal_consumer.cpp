#include <limitcounter/journal_consumer.hpp>

#include <algorithm>
#include <set>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/error.hpp>

namespace limitcounter {
namespace {

JournalEvent parse_event(std::uint32_t partition, const Reply& id, const Reply& fields) {
  JournalEvent event;
  event.partition = partition;
  event.stream_id = id.as_string();
  event.id = std::to_string(partition) + "/" + event.stream_id;
  const auto& items = fields.as_array();
  for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
    const std::string& name = items[i].as_string();
    const Reply& value = items[i + 1];
    if (name == "type") {
      event.type = value.as_string();
    } else if (name == "user") {
      event.user = value.as_string();
    } else if (name == "order") {
      event.order = value.as_string();
    } else if (name == "amount") {
      event.amount = value.to_int64();
    } else if (name == "balance") {
      event.balance = value.to_int64();
    } else if (name == "version") {
      event.version = value.to_int64();
    } else if (name == "time") {
      event.time = TimePoint{std::chrono::milliseconds{value.to_int64()}};
    } else if (name == "reason") {
      event.reason = value.as_string();
    } else if (name == "stream_id") { // a dead letter: the id it had in the journal
      event.stream_id = value.as_string();
      event.id = std::to_string(partition) + "/" + event.stream_id;
    }
  }
  return event;
}

std::string field(const Reply& fields, const std::string& name) {
  const auto& items = fields.as_array();
  for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
    if (items[i].as_string() == name) {
      return items[i + 1].as_string();
    }
  }
  return {};
}

constexpr std::size_t max_error_bytes = 1000;

/// The number (1-based, as the script reads it) of `key` in `keys`, added if missing: a user's
/// key goes into KEYS once, however many of its events the batch has.
std::string key_number(std::vector<std::string>& keys, const std::string& key) {
  auto position = std::find(keys.begin(), keys.end(), key);
  if (position == keys.end()) {
    position = keys.insert(keys.end(), key);
  }
  return std::to_string(position - keys.begin() + 1);
}

} // namespace

JournalConsumer::JournalConsumer(Redis redis, const WalletOptions& wallet,
                                 JournalConsumerOptions options)
    : redis_(std::move(redis)), keys_(wallet.key_prefix, wallet.partitions),
      persister_group_(wallet.persister_group), options_(std::move(options)) {
  validate_key_part("wallet persister_group", persister_group_);
  validate_key_part("journal group", options_.group);
  validate_key_part("journal consumer", options_.consumer);
  if (options_.batch < 1) {
    throw Error(errc::invalid_argument, "journal batch must be at least 1");
  }
  if (options_.max_attempts < 1) {
    throw Error(errc::invalid_argument, "journal max_attempts " +
                                            std::to_string(options_.max_attempts) +
                                            " must be at least 1");
  }
  if (options_.claim_idle.count() < 0) {
    throw Error(errc::invalid_argument, "journal claim_idle " +
                                            std::to_string(options_.claim_idle.count()) +
                                            " ms must not be negative");
  }
}

void JournalConsumer::check_partition(std::uint32_t partition) const {
  if (partition >= keys_.partitions()) {
    throw Error(errc::invalid_argument, "journal partition " + std::to_string(partition) +
                                            " is not below " + std::to_string(keys_.partitions()));
  }
}

std::vector<JournalEvent> JournalConsumer::read(std::uint32_t partition) {
  check_partition(partition);
  const Reply reply = redis_.eval(
      scripts::journal, {keys_.journal(partition), keys_.journal_held(partition, options_.group)},
      {"read", options_.group, options_.consumer, std::to_string(options_.batch),
       std::to_string(options_.claim_idle.count())});
  const auto& items = reply.as_array();
  std::vector<JournalEvent> events;
  events.reserve(items.size() / 2);
  for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
    events.push_back(parse_event(partition, items[i], items[i + 1]));
  }
  return events;
}

void JournalConsumer::acknowledge(std::uint32_t partition,
                                  const std::vector<JournalEvent>& events) {
  check_partition(partition);
  if (events.empty()) {
    return;
  }
  std::vector<std::string> keys{keys_.journal(partition), keys_.pending(partition),
                                keys_.journal_failures(partition, options_.group)};
  std::vector<std::string> args{"ack", options_.group, persister_group_};
  for (const auto& event : events) {
    args.push_back(event.stream_id);
    args.push_back(key_number(keys, keys_.user_pending(event.user)));
    args.push_back(key_number(keys, keys_.high_water(event.user)));
    args.push_back(event.user);
    args.push_back(event.order);
  }
  redis_.eval(scripts::journal, keys, args);
}

std::size_t JournalConsumer::reject(std::uint32_t partition,
                                    const std::vector<JournalEvent>& events,
                                    const std::string& error) {
  check_partition(partition);
  if (events.empty()) {
    return 0;
  }
  std::vector<std::string> keys{keys_.journal(partition),
                                keys_.journal_failures(partition, options_.group),
                                keys_.dead_letters(partition, options_.group)};
  std::vector<std::string> args{"fail",
                                options_.group,
                                persister_group_,
                                options_.consumer,
                                std::to_string(options_.max_attempts),
                                error.substr(0, max_error_bytes)};
  for (const auto& event : events) {
    args.push_back(event.stream_id);
    // a parked event of the persister group keeps every reload of its user out
    args.push_back(key_number(keys, keys_.high_water(event.user)));
  }
  const Reply reply = redis_.eval(scripts::journal, keys, args);
  return static_cast<std::size_t>(reply.to_int64());
}

std::vector<DeadLetter> JournalConsumer::dead_letters(std::uint32_t partition, std::size_t max,
                                                      const std::string& after) {
  check_partition(partition);
  const auto dash = after.find('-');
  if (!after.empty() && (dash == 0 || dash == std::string::npos || dash + 1 == after.size() ||
                         after.find_first_not_of("0123456789-") != std::string::npos ||
                         after.find('-', dash + 1) != std::string::npos || after.size() > 41)) {
    throw Error(errc::invalid_argument,
                "dead letter id " + detail::quote_for_message(after) + " is not <ms>-<seq>");
  }
  const Reply reply =
      redis_.command({"XRANGE", keys_.dead_letters(partition, options_.group),
                      after.empty() ? "-" : "(" + after, "+", "COUNT", std::to_string(max)});
  std::vector<DeadLetter> letters;
  for (const Reply& entry : reply.as_array()) {
    DeadLetter letter;
    letter.dead_id = entry.at(0).as_string();
    letter.event = parse_event(partition, entry.at(0), entry.at(1));
    letter.error = field(entry.at(1), "error");
    const std::string attempts = field(entry.at(1), "attempts");
    letter.attempts = attempts.empty() ? 0 : std::stoll(attempts);
    letters.push_back(std::move(letter));
  }
  return letters;
}

namespace {

/// Runs `handle(events)`; returns the exception it threw, if any.
std::exception_ptr try_handle(const JournalConsumer::Handler& handle,
                              const std::vector<JournalEvent>& events) {
  try {
    handle(events);
    return nullptr;
  } catch (...) {
    return std::current_exception();
  }
}

std::string message_of(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "a handler threw a non-exception";
  }
}

} // namespace

std::size_t JournalConsumer::handle_one_by_one(std::uint32_t partition,
                                               const std::vector<JournalEvent>& events,
                                               const Handler& handle, std::exception_ptr& failure) {
  std::set<std::string> failed_users; // their later events wait behind the failed one
  std::vector<JournalEvent> done;
  std::vector<std::string> hold{"hold", options_.group};
  for (const auto& event : events) {
    if (failed_users.count(event.user) != 0) {
      hold.push_back(event.stream_id);
      continue;
    }
    if (const std::exception_ptr error = try_handle(handle, {event})) {
      failed_users.insert(event.user);
      reject(partition, {event}, message_of(error));
      if (!failure) {
        failure = error;
      }
    } else {
      done.push_back(event);
    }
  }
  acknowledge(partition, done);
  if (hold.size() > 2) {
    redis_.eval(scripts::journal,
                {keys_.journal(partition), keys_.journal_held(partition, options_.group)}, hold);
  }
  return done.size();
}

std::vector<JournalLag> JournalConsumer::lag() {
  std::vector<std::uint32_t> partitions(keys_.partitions());
  for (std::uint32_t partition = 0; partition < keys_.partitions(); ++partition) {
    partitions[partition] = partition;
  }
  return lag_of(partitions);
}

JournalLag JournalConsumer::lag(std::uint32_t partition) {
  check_partition(partition);
  return lag_of({partition}).front();
}

std::vector<JournalLag> JournalConsumer::lag_of(const std::vector<std::uint32_t>& partitions) {
  std::vector<ScriptCall> calls;
  calls.reserve(partitions.size());
  for (const std::uint32_t partition : partitions) {
    calls.push_back({&scripts::journal, {keys_.journal(partition)}, {"lag", options_.group}});
  }
  std::vector<JournalLag> lags;
  lags.reserve(partitions.size());
  try {
    const std::vector<Reply> replies = redis_.eval_pipeline(calls);
    for (std::size_t i = 0; i < partitions.size(); ++i) {
      if (replies[i].is_error()) {
        throw Error(errc::server_error,
                    "journal lag of partition " + std::to_string(partitions[i]) + ": " +
                        replies[i].as_string(),
                    Outcome::failed);
      }
      const std::int64_t unread = replies[i].at(0).to_int64();
      lags.push_back({options_.group, partitions[i],
                      unread < 0 ? std::nullopt : std::optional<std::int64_t>(unread),
                      replies[i].at(1).to_int64()});
    }
  } catch (const Error& e) {
    if (options_.observer) {
      options_.observer->on_error(e);
    }
    throw;
  }
  if (options_.observer) {
    for (const JournalLag& each : lags) {
      options_.observer->on_journal_lag(each);
    }
  }
  return lags;
}

std::size_t JournalConsumer::poll(const Handler& handle) {
  std::size_t handled = 0;
  std::exception_ptr failure;
  for (std::uint32_t partition = 0; partition < keys_.partitions(); ++partition) {
    const std::vector<JournalEvent> events = read(partition);
    if (events.empty()) {
      continue;
    }
    if (try_handle(handle, events)) {
      handled += handle_one_by_one(partition, events, handle, failure);
      continue;
    }
    acknowledge(partition, events);
    handled += events.size();
  }
  if (options_.observer) {
    try {
      lag(); // after the pass: what is still to do
    } catch (const Error&) {
      // reported to on_error; a metric must not fail the persister's pass
    }
  }
  if (failure) {
    std::rethrow_exception(failure);
  }
  return handled;
}

} // namespace limitcounter
