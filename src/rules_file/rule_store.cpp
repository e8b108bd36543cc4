// RuleStore: versioned rule sets in Redis (include/limitcounter/rule_store.hpp).
#include <limitcounter/rule_store.hpp>

#include <algorithm>
#include <charconv>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/key_part.hpp>
#include <limitcounter/keys.hpp>
#include <limitcounter/rules_file.hpp>

namespace limitcounter {
namespace {

[[noreturn]] void throw_unexpected(const Reply& reply, const std::string& what) {
  throw Error(errc::protocol_error, what + ": unexpected reply " + reply.debug_string(),
              Outcome::unknown);
}

std::uint64_t to_unsigned(const std::string& text, const std::string& what) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) {
    throw Error(errc::protocol_error,
                what + ": " + detail::quote_for_message(text) + " is not a non-negative integer",
                Outcome::failed);
  }
  return value;
}

// The field/value pairs of a hash or stream entry, as a list.
std::string field(const Reply& pairs, std::string_view name) {
  const auto& items = pairs.as_array();
  for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
    if (items[i].as_string() == name) {
      return items[i + 1].as_string();
    }
  }
  return {};
}

RuleSetVersion decode_version(std::uint64_t version, const Reply& pairs) {
  RuleSetVersion result;
  result.version = version;
  result.author = field(pairs, "author");
  result.reason = field(pairs, "reason");
  result.action = field(pairs, "action");
  result.yaml = field(pairs, "yaml");
  const std::string at = field(pairs, "at");
  result.at = TimePoint(std::chrono::milliseconds(at.empty() ? 0 : to_unsigned(at, "time")));
  return result;
}

void check_change(const RuleChange& change) {
  // Free text, but bounded: the history keeps it for every version.
  constexpr std::size_t max_bytes = 4096;
  for (const auto& [what, text] :
       {std::pair<const char*, const std::string&>{"author", change.author},
        {"reason", change.reason}}) {
    if (text.size() > max_bytes) {
      throw Error(errc::invalid_argument, std::string("rule change ") + what + " " +
                                              detail::quote_for_message(text) + " is over " +
                                              std::to_string(max_bytes) + " bytes");
    }
  }
}

// The YAML to store for `rules`, after checking that reading it back gives the same set.
std::string checked_yaml(const RuleSet& rules, const std::string& store_name) {
  std::string yaml = to_yaml(rules);
  if (yaml.size() > RuleStore::max_yaml_bytes) {
    throw Error(errc::invalid_argument,
                "rule set for store " + detail::quote_for_message(store_name) + " is " +
                    std::to_string(yaml.size()) + " bytes as YAML, over the limit of " +
                    std::to_string(RuleStore::max_yaml_bytes));
  }
  const RuleSet back = rules_from_yaml(yaml, store_name);
  if (to_yaml(back) != yaml) {
    throw Error(errc::invalid_argument, "rule set for store " +
                                            detail::quote_for_message(store_name) +
                                            " does not read back as itself from YAML");
  }
  return yaml;
}

} // namespace

RuleStore::RuleStore(Redis redis, std::string name, RuleStoreOptions options)
    : redis_(std::move(redis)), name_(std::move(name)), options_(std::move(options)) {
  validate_key_part("rule store name", name_);
  validate_key_prefix(options_.key_prefix);
  if (options_.history_limit == 0) {
    throw Error(errc::invalid_argument, "rule store " + detail::quote_for_message(name_) +
                                            ": history_limit 0 (it must keep at least 1 version)");
  }
  key_base_ = options_.key_prefix + "rules:";
}

std::string RuleStore::current_key() const { return tagged_key(key_base_, name_, ":current"); }

std::string RuleStore::version_key(std::uint64_t version) const {
  return tagged_key(key_base_, name_, ":v:" + std::to_string(version));
}

std::string RuleStore::history_key() const { return tagged_key(key_base_, name_, ":history"); }

std::optional<std::uint64_t> RuleStore::store(const std::string& yaml, const RuleChange& change,
                                              const std::string& action, std::uint64_t expected,
                                              std::uint64_t& found) {
  const std::uint64_t next = expected + 1;
  std::vector<std::string> keys{current_key(), version_key(next), history_key()};
  if (next > options_.history_limit) {
    keys.push_back(version_key(next - options_.history_limit));
  }
  const Reply reply = redis_.eval(scripts::rule_store_put, keys,
                                  {std::to_string(expected), yaml, change.author, change.reason,
                                   action, std::to_string(options_.history_limit)});
  const std::string& status = reply.at(0).as_string();
  if (status == "stored") {
    return static_cast<std::uint64_t>(reply.at(1).to_int64());
  }
  if (status != "conflict") {
    throw_unexpected(reply, "rule store " + detail::quote_for_message(name_) + " put");
  }
  found = static_cast<std::uint64_t>(reply.at(1).to_int64());
  return std::nullopt;
}

std::uint64_t RuleStore::store_next(const std::string& yaml, const RuleChange& change,
                                    const std::string& action,
                                    std::optional<std::uint64_t> expected_version) {
  check_change(change);
  std::uint64_t expected = expected_version ? *expected_version : current_version();
  for (;;) {
    std::uint64_t found = 0;
    if (const auto stored = store(yaml, change, action, expected, found)) {
      return *stored;
    }
    if (expected_version) {
      // A retry after a lost reply finds its own first attempt stored as the version after
      // the one it expected (also when another writer stored more versions since): report
      // that one, as the first attempt would have.
      if (found > expected) {
        const auto mine = get(expected + 1);
        if (mine && mine->yaml == yaml && mine->author == change.author &&
            mine->reason == change.reason && mine->action == action) {
          return expected + 1;
        }
      }
      throw Error(errc::conflict,
                  "rule store " + detail::quote_for_message(name_) + ": expected version " +
                      std::to_string(expected) + " but the current version is " +
                      std::to_string(found),
                  Outcome::failed);
    }
    expected = found; // another writer came first: go after it
  }
}

std::uint64_t RuleStore::put(const RuleSet& rules, const RuleChange& change,
                             std::optional<std::uint64_t> expected_version) {
  return store_next(checked_yaml(rules, name_), change, "put", expected_version);
}

std::uint64_t RuleStore::put_yaml(std::string_view yaml, const RuleChange& change,
                                  std::optional<std::uint64_t> expected_version) {
  if (yaml.size() > max_yaml_bytes) {
    // Refused before parsing: a huge text must not cost a parse.
    throw Error(errc::invalid_argument,
                "rule set text for store " + detail::quote_for_message(name_) + " is " +
                    std::to_string(yaml.size()) + " bytes, over the limit of " +
                    std::to_string(max_yaml_bytes));
  }
  return put(rules_from_yaml(yaml, name_), change, expected_version);
}

template <typename Edit>
std::uint64_t RuleStore::edit_current(const RuleChange& change, const std::string& action,
                                      Edit edit) {
  for (;;) {
    const auto now = current();
    RuleSet edited = edit(now ? parse(*now) : RuleSet());
    try {
      return store_next(checked_yaml(edited, name_), change, action, now ? now->version : 0);
    } catch (const Error& e) {
      if (e.code() != errc::conflict) {
        throw;
      }
      // Another writer stored a version meanwhile: edit that one instead.
    }
  }
}

std::uint64_t RuleStore::put_rule(const Rule& rule, const RuleChange& change) {
  return edit_current(change, "put_rule", [&](const RuleSet& set) {
    RuleSet edited(set.attributes());
    bool replaced = false;
    for (const Rule& existing : set.rules()) {
      if (existing.name() == rule.name()) {
        edited.add(rule);
        replaced = true;
      } else {
        edited.add(existing);
      }
    }
    if (!replaced) {
      edited.add(rule);
    }
    return edited;
  });
}

std::uint64_t RuleStore::delete_rule(std::string_view rule_name, const RuleChange& change) {
  return edit_current(change, "delete_rule", [&](const RuleSet& set) {
    RuleSet edited(set.attributes());
    bool found = false;
    for (const Rule& existing : set.rules()) {
      if (existing.name() == rule_name) {
        found = true;
      } else {
        edited.add(existing);
      }
    }
    if (!found) {
      throw Error(errc::invalid_argument, "rule store " + detail::quote_for_message(name_) +
                                              ": no rule " + detail::quote_for_message(rule_name) +
                                              " to delete");
    }
    return edited;
  });
}

std::uint64_t RuleStore::clear(const RuleChange& change) {
  return edit_current(change, "clear",
                      [](const RuleSet& set) { return RuleSet(set.attributes()); });
}

std::uint64_t RuleStore::rollback(std::uint64_t version, const RuleChange& change) {
  const auto old = get(version);
  if (!old) {
    throw Error(errc::not_found, "rule store " + detail::quote_for_message(name_) + ": version " +
                                     std::to_string(version) +
                                     " is not stored (never, or trimmed from the history)");
  }
  // Validated again: a version stored by an older library must still read.
  return store_next(checked_yaml(parse(*old), name_), change, "rollback:" + std::to_string(version),
                    std::nullopt);
}

std::uint64_t RuleStore::current_version() const {
  const Reply reply = redis_.command({"GET", current_key()});
  return reply.is_nil() ? 0 : to_unsigned(reply.as_string(), current_key());
}

std::optional<RuleSetVersion> RuleStore::current() const {
  const std::uint64_t version = current_version();
  return version == 0 ? std::nullopt : get(version);
}

std::optional<Rule> RuleStore::get_rule(std::string_view rule_name) const {
  const auto now = current();
  if (now) {
    const RuleSet set = parse(*now); // named: the loop walks its rules
    for (const Rule& rule : set.rules()) {
      if (rule.name() == rule_name) {
        return rule;
      }
    }
  }
  return std::nullopt;
}

std::optional<RuleSetVersion> RuleStore::get(std::uint64_t version) const {
  const Reply reply = redis_.command({"HGETALL", version_key(version)});
  if (reply.is_error()) {
    throw Error(errc::server_error, reply.as_string(), Outcome::failed);
  }
  if (reply.as_array().empty()) {
    return std::nullopt;
  }
  return decode_version(version, reply);
}

std::vector<RuleSetVersion> RuleStore::history(std::size_t limit) const {
  const Reply reply = redis_.command({"XREVRANGE", history_key(), "+", "-", "COUNT",
                                      std::to_string(std::max<std::size_t>(limit, 1))});
  if (reply.is_error()) {
    throw Error(errc::server_error, reply.as_string(), Outcome::failed);
  }
  std::vector<RuleSetVersion> entries;
  for (const Reply& entry : reply.as_array()) {
    if (entries.size() == limit) {
      break;
    }
    const Reply& pairs = entry.at(1);
    entries.push_back(decode_version(to_unsigned(field(pairs, "version"), history_key()), pairs));
  }
  return entries;
}

RuleSet RuleStore::parse(const RuleSetVersion& version) {
  return rules_from_yaml(version.yaml, "version " + std::to_string(version.version));
}

} // namespace limitcounter
