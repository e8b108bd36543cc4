#pragma once
// Keys: the one place that builds Redis key names. Every key carries a hash tag
// `{...}` so that the keys one script touches share a Redis Cluster slot.

#include <cstdint>
#include <string>
#include <string_view>

#include <limitcounter/calendar.hpp>
#include <limitcounter/key_part.hpp>

namespace limitcounter {

/// Throws `Error` (invalid_argument) unless `prefix` is at most 64 bytes of printable
/// characters without whitespace or braces. Colons are allowed (`trans:limit:`).
inline void validate_key_prefix(std::string_view prefix) {
  if (prefix.empty()) {
    return;
  }
  validate_key_part("key prefix", prefix, "+:");
}

/// Builds `<prefix>{<tag>}<rest>`: everything inside the braces decides the cluster slot.
inline std::string tagged_key(std::string_view prefix, std::string_view tag,
                              std::string_view rest) {
  std::string key;
  key.reserve(prefix.size() + tag.size() + rest.size() + 2);
  key.append(prefix).append(1, '{').append(tag).append(1, '}').append(rest);
  return key;
}

/// FNV-1a 64 of `text`: a stable hash for partitioning (the same on every host and build).
constexpr std::uint64_t stable_hash(std::string_view text) noexcept {
  std::uint64_t hash = 14695981039346656037ULL;
  for (const char c : text) {
    hash ^= static_cast<std::uint8_t>(c);
    hash *= 1099511628211ULL;
  }
  return hash;
}

/// Keys spread over a fixed number of partitions, each with its own hash tag
/// `{<letter><N>}`: the base of the wallet's and the red packets' keys, whose scripts touch
/// one owner's keys and that owner's partition queue in one slot.
class PartitionedKeys {
public:
  /// Throws `Error` (invalid_argument) for a bad prefix or a partition count outside 1..1024.
  PartitionedKeys(std::string prefix, std::uint32_t partitions, char tag_letter)
      : prefix_(std::move(prefix)), partitions_(partitions), tag_letter_(tag_letter) {
    validate_key_prefix(prefix_);
    if (partitions_ < 1 || partitions_ > 1024) {
      throw Error(errc::invalid_argument,
                  "partitions " + std::to_string(partitions_) + " must be from 1 to 1024");
    }
  }

  /// The number of partitions (1..1024).
  std::uint32_t partitions() const noexcept { return partitions_; }
  /// The partition of an owner (a user, a packet): stable_hash(owner) % partitions.
  std::uint32_t partition_of(std::string_view owner) const noexcept {
    return static_cast<std::uint32_t>(stable_hash(owner) % partitions_);
  }

protected:
  /// `<prefix>{<letter><partition>}<rest>`
  std::string key(std::uint32_t partition, std::string_view rest) const {
    return tagged_key(prefix_, std::string(1, tag_letter_) + std::to_string(partition), rest);
  }

private:
  std::string prefix_;
  std::uint32_t partitions_;
  char tag_letter_;
};

/// Keys of the period counters:
/// `<prefix>{<counter>}:<period>:<window id>`, e.g. `trans:limit:{channel}:day:20211111`,
/// a hash with one field per dimension (`Ali+Deduct+cmb`) whose value is `<count>:<amount>`.
/// All windows of one counter share a slot, so one script updates day and month together.
class CounterKeys {
public:
  /// The prefix when none is given.
  static constexpr std::string_view default_prefix = "trans:limit:";

  /// Throws `Error` (invalid_argument) naming a bad prefix.
  explicit CounterKeys(std::string prefix = std::string(default_prefix))
      : prefix_(std::move(prefix)) {
    validate_key_prefix(prefix_);
  }

  /// Throws `Error` (invalid_argument) unless `counter` is a valid counter name: a key part
  /// that may contain '+' (so a rule's shape `channel+transType+dept` can name its counter).
  static void validate_counter_name(std::string_view counter) {
    validate_key_part("counter name", counter, "+");
  }

  /// The hash of `counter` for one window. `counter` must have been validated.
  std::string window(std::string_view counter, Period period, std::string_view window_id) const {
    std::string rest;
    const std::string_view period_name = to_string(period);
    rest.reserve(period_name.size() + window_id.size() + 2);
    rest.append(1, ':').append(period_name).append(1, ':').append(window_id);
    return tagged_key(prefix_, counter, rest);
  }

  /// The idempotency record of a limits transaction: `<prefix>tx:{<id>}`. `id` must have
  /// been validated.
  std::string transaction(std::string_view id) const {
    std::string key;
    key.reserve(prefix_.size() + id.size() + 5);
    key.append(prefix_).append("tx:{").append(id).append(1, '}');
    return key;
  }

  /// On a Redis Cluster, the record of the share of a transaction whose counters live in the
  /// slot of `counter`: `<prefix>{<counter>}:tx:<id>`.
  std::string transaction_share(std::string_view counter, std::string_view id) const {
    return tagged_key(prefix_, counter, std::string(":tx:").append(id));
  }

  /// The set of open reservations holding quota in `counter`'s windows:
  /// `<prefix>{<counter>}:holds`, a sorted set scored by hold expiry.
  std::string holds(std::string_view counter) const {
    return tagged_key(prefix_, counter, ":holds");
  }

  /// The ids of the local-fallback reports added to `counter`'s windows:
  /// `<prefix>{<counter>}:reports`, a hash (report id -> "<count>:<amount>") that expires with
  /// the latest window it served.
  std::string local_reports(std::string_view counter) const {
    return tagged_key(prefix_, counter, ":reports");
  }

  /// The audit stream of `counter`'s corrections (`LimitCounter::adjust`):
  /// `<prefix>{<counter>}:audit`, in the counter's slot so that one script moves the counter
  /// and appends the entry. Never trimmed or expired by the library.
  std::string audit(std::string_view counter) const {
    return tagged_key(prefix_, counter, ":audit");
  }

  /// The idempotency record of correction `id` of `counter`: `<prefix>{<counter>}:adj:<id>`.
  std::string correction(std::string_view counter, std::string_view id) const {
    return tagged_key(prefix_, counter, std::string(":adj:").append(id));
  }

  /// The day window hash of the cap `cap`: `<prefix>{cap:<cap>}:day:<window id>`, one field
  /// per subject. `cap` must have been validated (no ':' in it, so it never meets a counter).
  std::string cap_window(std::string_view cap, std::string_view window_id) const {
    std::string tag;
    tag.reserve(cap.size() + 4);
    tag.append("cap:").append(cap);
    return tagged_key(prefix_, tag, std::string(":day:").append(window_id));
  }

  /// The sliding window of `subject` under `limiter`: `<prefix>sw:{<limiter>:<subject>}`, a
  /// sorted set of admitted request times. Each subject gets its own slot.
  std::string sliding(std::string_view limiter, std::string_view subject) const {
    std::string tag;
    tag.reserve(limiter.size() + subject.size() + 1);
    tag.append(limiter).append(1, ':').append(subject);
    return tagged_key(prefix_ + "sw:", tag, {});
  }

  /// The key prefix given at construction.
  const std::string& prefix() const noexcept { return prefix_; }

private:
  std::string prefix_;
};

} // namespace limitcounter
