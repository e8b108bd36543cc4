#pragma once
// A shared rule store in Redis: versioned rule sets with a history, and a follower that keeps
// LimitCounters on the current version (docs/RULES.md, "Rules shared through Redis").
//
// Part of the optional target `limitcounter::rules_file` (it stores the YAML of rules_file.hpp).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <limitcounter/calendar.hpp>
#include <limitcounter/error.hpp>
#include <limitcounter/limit_counter.hpp>
#include <limitcounter/redis.hpp>
#include <limitcounter/rule.hpp>

namespace limitcounter {

/// Who changed the rules and why (kept in the history).
struct RuleChange {
  std::string author; ///< who made the change (free text, kept as given)
  std::string reason; ///< why (free text, kept as given)
};

/// One version of a stored rule set.
struct RuleSetVersion {
  std::uint64_t version = 0; ///< 1, 2, 3, ... per store name
  std::string author;        ///< from RuleChange
  std::string reason;        ///< from RuleChange
  std::string action;        ///< "put", "put_rule", "delete_rule", "clear", "rollback:<n>"
  TimePoint at;              ///< when it was stored (the Redis server's clock)
  std::string yaml;          ///< the whole set in the docs/RULES.md format (to_yaml)
};

/// Options of a `RuleStore`.
struct RuleStoreOptions {
  std::string key_prefix = "lc:"; ///< prefix of every key of the store
  /// Versions kept: the history stream is trimmed to exactly this many entries (MAXLEN =)
  /// and the version that falls out is deleted, so `get` of an older one returns nullopt and
  /// every version `history` lists can be read with `get`. >= 1.
  std::size_t history_limit = 1000;
};

/// Versioned rule sets in Redis, one store per `name`. Every key of a store is in one
/// cluster slot (hash tag `{<name>}`): `<prefix>rules:{<name>}:current` (the current version
/// number), `<prefix>rules:{<name>}:v:<n>` (a hash: yaml, author, reason, action, at) and
/// `<prefix>rules:{<name>}:history` (a stream, the followers' notification).
///
/// Every write validates the set in C++ first (a set that does not validate is never stored)
/// and then stores it with one script (lua/rule_store_put.lua): the version hash, `current`
/// and the history entry, all or nothing. Versions increase by one per write.
///
/// Errors: bad input throws `Error` (invalid_argument) naming the value, before anything is
/// sent; Redis failures as described at `Redis`. A write that throws Outcome::unknown may have
/// been stored: `current()` tells (its author, reason and yaml are yours), or retry with
/// `expected_version`: a retry whose first attempt was stored returns that version instead of
/// storing a second one. Thread-safe.
///
/// Retries: `put` and `put_yaml` with `expected_version` are idempotent by version. Sent
/// again with the same arguments after a lost reply, the call stores nothing and returns the
/// version its first attempt stored (recognised by content: yaml, author, reason, action;
/// while that version is kept in the history), even if other writers stored newer versions
/// since. Without `expected_version` a retry may store the same set once more as a new
/// version; so may `put_rule`, `clear` and `rollback` (each edits the current version it
/// reads, which is then the first attempt's), and a retried `delete_rule` finds no rule to
/// delete. To make those safe, read `current()` before retrying.
class RuleStore {
public:
  /// Largest YAML text stored, in bytes: a bigger set is refused before anything is sent.
  static constexpr std::size_t max_yaml_bytes = 1024 * 1024;

  /// `name` is a key part (1 to 64 bytes, no whitespace, `:`, `+`, `{`, `}`). Sends nothing.
  /// Throws `Error` (invalid_argument) naming a bad name, prefix or a history_limit of 0.
  RuleStore(Redis redis, std::string name, RuleStoreOptions options = {});

  /// Validates `rules` (rules_from_yaml(to_yaml(rules)) must give the set back) and stores it
  /// as the next version, atomically (one script). `expected_version` (optional): compare-and-
  /// set, throws Error(conflict) naming both versions when the current one differs (0: expects
  /// an empty store), unless version `expected_version + 1` holds this very change (a retry
  /// after a lost reply: that version is returned, nothing stored). Without it, a concurrent
  /// writer only makes it try again on the newer version. Returns the new version. Throws
  /// invalid_argument for a set over `max_yaml_bytes` as YAML.
  std::uint64_t put(const RuleSet& rules, const RuleChange& change,
                    std::optional<std::uint64_t> expected_version = std::nullopt);
  /// Same from YAML text (validated before anything is stored; errors as rules_from_yaml, the
  /// source named "<store name>"). The text is stored as `to_yaml` of what it reads.
  std::uint64_t put_yaml(std::string_view yaml, const RuleChange& change,
                         std::optional<std::uint64_t> expected_version = std::nullopt);
  /// Adds or replaces one rule (by name) in the current set (an empty set if none is stored),
  /// as a new version (action "put_rule"). Throws invalid_argument if the set refuses it.
  std::uint64_t put_rule(const Rule& rule, const RuleChange& change);
  /// Removes one rule by name, as a new version (action "delete_rule"); throws
  /// invalid_argument naming it if absent (also when nothing is stored).
  std::uint64_t delete_rule(std::string_view rule_name, const RuleChange& change);
  /// Removes every rule, as a new version with no rules and the current set's attributes
  /// (action "clear"); older versions stay in the history, so `rollback` brings them back.
  /// An empty store gets a first, empty version. Edits as `put_rule` (compare-and-set, again
  /// on the newer set if another writer came first); a lost reply (Outcome::unknown) may
  /// have stored it: `current()` tells.
  std::uint64_t clear(const RuleChange& change);
  /// Stores the content of `version` again as a new version (action "rollback:<version>").
  /// Throws not_found naming the version if it is not stored (never, or trimmed).
  std::uint64_t rollback(std::uint64_t version, const RuleChange& change);

  /// The current version (nullopt when nothing is stored yet).
  std::optional<RuleSetVersion> current() const;
  /// One given version (nullopt when it is not stored: never, or trimmed).
  std::optional<RuleSetVersion> get(std::uint64_t version) const;
  /// The rule named `rule_name` in the current version (nullopt when no rule has that name
  /// or nothing is stored). Reads and parses the current version (throws as `current` and
  /// `parse`).
  std::optional<Rule> get_rule(std::string_view rule_name) const;
  /// The current version number (0 when nothing is stored), one GET.
  std::uint64_t current_version() const;
  /// Newest first, at most `limit` entries (yaml left empty in history entries).
  std::vector<RuleSetVersion> history(std::size_t limit = 20) const;
  /// RuleSet of a version (rules_from_yaml of its yaml). Throws invalid_argument as
  /// rules_from_yaml, the source named "version <n>".
  static RuleSet parse(const RuleSetVersion& version);

  /// The store's name.
  const std::string& name() const noexcept { return name_; }
  /// The connection the store uses.
  const Redis& redis() const noexcept { return redis_; }
  /// The options given at construction.
  const RuleStoreOptions& options() const noexcept { return options_; }
  /// Key of the current version number.
  std::string current_key() const;
  /// Key of the hash of `version`.
  std::string version_key(std::uint64_t version) const;
  /// Key of the history stream (the followers block on it with XREAD).
  std::string history_key() const;

private:
  /// Stores `yaml` (validated) as the version after `expected`; nullopt on a conflict, with
  /// the current version in `found`.
  std::optional<std::uint64_t> store(const std::string& yaml, const RuleChange& change,
                                     const std::string& action, std::uint64_t expected,
                                     std::uint64_t& found);
  /// Stores `yaml` (validated) as the next version, with compare-and-set when
  /// `expected_version` is given, else trying again on a conflict.
  std::uint64_t store_next(const std::string& yaml, const RuleChange& change,
                           const std::string& action,
                           std::optional<std::uint64_t> expected_version);
  /// Applies `edit` to the current set and stores the result (action `action`), trying again
  /// on the newer set when a concurrent writer stored one meanwhile.
  template <typename Edit>
  std::uint64_t edit_current(const RuleChange& change, const std::string& action, Edit edit);

  mutable Redis redis_; ///< (its calls are not const; sharing a pool is thread-safe)
  std::string name_;
  RuleStoreOptions options_;
  std::string key_base_; ///< `<prefix>rules:`
};

/// Options of a `RuleFollower`.
struct RuleFollowerOptions {
  /// The longest wait for a change notification before reading `current` anyway: a lost
  /// notification delays a swap by at most this. > 0.
  std::chrono::milliseconds poll_interval{1000};
  /// Called (on the follower's thread) when a version cannot be loaded or parsed (it is then
  /// skipped: the counters keep the version in force) or Redis fails; the follower goes on.
  /// Must not throw. Empty: errors are ignored.
  std::function<void(const Error&)> on_error;
  /// Called (on the follower's thread) after each swap with the version now in force. Must
  /// not throw.
  std::function<void(std::uint64_t)> on_swap;
};

/// Keeps LimitCounters on the store's current version: a background thread that blocks on
/// the store's history stream (`XREAD BLOCK`, on a connection of its own with pool_size 1) and
/// reads `current` when an entry arrives and every `poll_interval`, so a new version wakes it
/// at once and a lost notification only delays it to the next poll.
///
/// Bound: while Redis answers, every counter runs on a put's version within
/// `poll_interval + command_timeout` (of the store's Redis options) of the put (one wait cut
/// short by the notification or ended by the poll, then the reads of `current` and the
/// version). A version that fails to parse is skipped (reported to `on_error`), never half
/// applied: each counter's swap is one `LimitCounter::set_rules(rules, version)`.
class RuleFollower {
public:
  /// Loads the current version synchronously first (throws not_found if the store is empty,
  /// invalid_argument if it does not parse, or the Redis error), sets it on every counter,
  /// then follows. So a process (re)started while the current version does not parse fails
  /// loudly here rather than running without rules; the store refuses sets that do not
  /// validate, so only a version written by hand (or by another tool) can be bad: fix it
  /// with `RuleStore::rollback` to a good version. Throws invalid_argument for a null
  /// counter or a poll_interval <= 0.
  RuleFollower(RuleStore store, std::vector<std::shared_ptr<LimitCounter>> counters,
               RuleFollowerOptions options = {});
  /// Stops and joins the thread: returns within about min(`poll_interval`, 250 ms) +
  /// `command_timeout` (the follower blocks on XREAD in slices of at most 250 ms).
  ~RuleFollower();
  RuleFollower(const RuleFollower&) = delete;
  RuleFollower& operator=(const RuleFollower&) = delete;

  /// The version in force on every counter.
  std::uint64_t version() const;

private:
  void run();
  /// Waits for a history entry after `last_id_` on the follower's connection, at most
  /// `until_poll` (and at most a short slice, so that the destructor is not kept waiting);
  /// true when one came.
  bool wait_for_change(std::chrono::milliseconds until_poll);
  /// Loads the current version and sets it on every counter if newer than the one in force;
  /// throws what loading or parsing throws.
  void swap_if_newer();
  void report(const Error& error) const;

  RuleStore store_; ///< on the follower's own connection
  std::vector<std::shared_ptr<LimitCounter>> counters_;
  RuleFollowerOptions options_;
  std::atomic<std::uint64_t> version_{0};
  std::uint64_t skipped_ = 0; ///< the last version refused (reported once, not every poll)
  std::string last_id_;       ///< the last history entry seen
  std::mutex stop_mutex_;
  std::condition_variable stop_changed_;
  bool stop_ = false; ///< guarded by stop_mutex_
  std::thread thread_;
};

} // namespace limitcounter
