#include <limitcounter/journal_consumer.hpp>

#include <algorithm>

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
    }
  }
  return event;
}

} // namespace

JournalConsumer::JournalConsumer(Redis redis, const WalletOptions& wallet,
                                 JournalConsumerOptions options)
    : redis_(std::move(redis)), keys_(wallet.key_prefix, wallet.partitions),
      options_(std::move(options)) {
  validate_key_part("journal group", options_.group);
  validate_key_part("journal consumer", options_.consumer);
  if (options_.batch < 1) {
    throw Error(errc::invalid_argument, "journal batch must be at least 1");
  }
}

std::vector<JournalEvent> JournalConsumer::read(std::uint32_t partition) {
  const Reply reply =
      redis_.eval(scripts::journal, {keys_.journal(partition)},
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
  if (events.empty()) {
    return;
  }
  std::vector<std::string> keys{keys_.journal(partition), keys_.pending(partition)};
  std::vector<std::string> args{"ack", options_.group};
  for (const auto& event : events) {
    const std::string pending = keys_.user_pending(event.user);
    auto position = std::find(keys.begin() + 2, keys.end(), pending);
    if (position == keys.end()) {
      position = keys.insert(keys.end(), pending);
    }
    args.push_back(event.stream_id);
    args.push_back(std::to_string(position - keys.begin() + 1));
    args.push_back(event.user);
    args.push_back(event.order);
  }
  redis_.eval(scripts::journal, keys, args);
}

std::size_t JournalConsumer::poll(const Handler& handle) {
  std::size_t handled = 0;
  for (std::uint32_t partition = 0; partition < keys_.partitions(); ++partition) {
    const std::vector<JournalEvent> events = read(partition);
    if (events.empty()) {
      continue;
    }
    handle(events);
    acknowledge(partition, events);
    handled += events.size();
  }
  return handled;
}

} // namespace limitcounter
