#include "limit_counter/declared_keys.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>

#include "limit_counter/codec/common.hpp"
#include "limit_counter/codec/decide_arguments.hpp"

namespace limitcounter::detail {
namespace {

// Reads, then a round for a record that changed meanwhile, then one more.
constexpr int max_rounds = 3;

// The counters' and hold sets' keys of counter sets by their key. A set's text never changes
// under its name (the name is its digest), so what was read once stays true; the cache is
// emptied when full rather than kept in order.
class CounterSetCache {
public:
  bool find(const std::string& set_key, std::vector<std::string>& keys) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto found = sets_.find(set_key);
    if (found == sets_.end()) {
      return false;
    }
    keys = found->second;
    return true;
  }
  void keep(const std::string& set_key, const std::vector<std::string>& keys) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (sets_.size() >= capacity) {
      sets_.clear();
    }
    sets_.emplace(set_key, keys);
  }

private:
  static constexpr std::size_t capacity = 4096;
  std::mutex mutex_;
  std::unordered_map<std::string, std::vector<std::string>> sets_;
};

CounterSetCache& counter_set_cache() {
  static CounterSetCache cache;
  return cache;
}

// The counters' and hold sets' keys of the counter set at `set_key` (none if it is gone): its
// text is "<c>\n" then c lines "<key> <field number>", then the hold sets, one a line.
std::vector<std::string> counter_set_keys(Redis& redis, const std::string& set_key) {
  std::vector<std::string> keys;
  if (counter_set_cache().find(set_key, keys)) {
    return keys;
  }
  const Reply text = redis.command({"GET", set_key}, Resend::same_id); // (a read)
  if (text.type() != Reply::Type::string) {
    return keys;
  }
  const auto lines = split(text.as_string(), '\n');
  for (std::size_t i = 1; i < lines.size(); ++i) {
    keys.emplace_back(lines[i].substr(0, lines[i].find(' '))); // (a hold set has no space)
  }
  counter_set_cache().keep(set_key, keys);
  return keys;
}

// The key of the counter set a lua/limit.lua record names ("<state> <fp> <amount> <set> ..."),
// or "" for one without counters: a denial ("d ..."), a tombstone, a home record, none.
std::string named_counter_set(Redis& redis, const std::string& record) {
  const Reply text = redis.command({"GET", record}, Resend::same_id); // (a read)
  if (text.type() != Reply::Type::string) {
    return {};
  }
  const auto words = split(text.as_string(), ' ');
  if (words.size() < 4 || words[0] == "d" || words[3] == "-") {
    return {};
  }
  return counter_set_key(record, words[3]);
}

// Adds to `keys` each of `more` it lacks.
void add_missing(std::vector<std::string>& keys, const std::vector<std::string>& more) {
  for (const std::string& key : more) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      keys.push_back(key);
    }
  }
}

// Adds the keys a {"needs", key...} reply names.
void add_needed(std::vector<std::string>& keys, const Reply& reply) {
  const auto& items = reply.as_array();
  std::vector<std::string> needed;
  for (std::size_t i = 1; i < items.size(); ++i) {
    needed.push_back(items[i].as_string());
  }
  add_missing(keys, needed);
}

[[noreturn]] void throw_still_needing(const ScriptCall& call, const Reply& reply) {
  throw Error(errc::protocol_error,
              "lua/limit.lua " + call.args.front() + " of " + call.keys.front() +
                  " still needs keys after " + std::to_string(max_rounds) +
                  " rounds (nothing was written): " + reply.debug_string(),
              Outcome::failed);
}

} // namespace

bool needs_keys(const Reply& reply) {
  return reply.type() == Reply::Type::array && !reply.as_array().empty() &&
         reply.at(0).type() == Reply::Type::string && reply.at(0).as_string() == "needs";
}

std::vector<std::string> reversal_keys(Redis& redis, const std::vector<std::string>& keys) {
  std::string set_key = named_counter_set(redis, keys.front());
  if (set_key.empty() && keys.size() > 1) {
    set_key = keys[1]; // the original's counter set, for a record that is gone
  }
  if (set_key.empty()) {
    return {};
  }
  std::vector<std::string> found{set_key};
  add_missing(found, counter_set_keys(redis, set_key));
  return found;
}

Reply eval_declaring(Redis& redis, ScriptCall call) {
  add_missing(call.keys, reversal_keys(redis, call.keys));
  for (int round = 1;; ++round) {
    Reply reply = redis.eval(*call.script, call.keys, call.args, call.resend);
    if (!needs_keys(reply)) {
      return reply;
    }
    if (round == max_rounds) {
      throw_still_needing(call, reply);
    }
    add_needed(call.keys, reply);
  }
}

std::vector<Reply> eval_pipeline_declaring(Redis& redis, std::vector<ScriptCall> calls) {
  std::map<std::string, std::vector<std::string>> more_of; // per record
  for (ScriptCall& call : calls) {
    auto found = more_of.find(call.keys.front());
    if (found == more_of.end()) {
      found = more_of.emplace(call.keys.front(), reversal_keys(redis, call.keys)).first;
    }
    add_missing(call.keys, found->second);
  }
  std::vector<Reply> replies = redis.eval_pipeline(calls);
  for (int round = 1;; ++round) {
    // per record, the first call that needed keys: it and the record's later calls go again
    std::map<std::string, std::size_t> first_needing;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      if (needs_keys(replies[i])) {
        first_needing.emplace(calls[i].keys.front(), i);
      }
    }
    if (first_needing.empty()) {
      return replies;
    }
    std::vector<std::size_t> again;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const auto found = first_needing.find(calls[i].keys.front());
      if (found == first_needing.end() || i < found->second) {
        continue;
      }
      if (round == max_rounds) {
        throw_still_needing(calls[i], replies[found->second]);
      }
      add_needed(calls[i].keys, replies[found->second]);
      again.push_back(i);
    }
    std::vector<ScriptCall> resent;
    resent.reserve(again.size());
    for (const std::size_t i : again) {
      resent.push_back(calls[i]);
    }
    std::vector<Reply> answers = redis.eval_pipeline(resent);
    for (std::size_t k = 0; k < again.size(); ++k) {
      replies[again[k]] = std::move(answers[k]);
    }
  }
}

} // namespace limitcounter::detail
