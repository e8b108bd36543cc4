#pragma once
// Keys: the one place that builds Redis key names. Every key carries a hash tag
// `{...}` so that the keys one script touches share a Redis Cluster slot.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include <limitcounter/calendar.hpp>
#include <limitcounter/key_part.hpp>

namespace limitcounter {

/// Throws `Error` (invalid_argument) unless `prefix` is empty or a key part
/// (`validate_key_part`) in which `:` and `+` are allowed (`trans:limit:`).
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
/// `seed`: the hash of what came before `text`, to hash a text given in pieces.
constexpr std::uint64_t stable_hash(std::string_view text,
                                    std::uint64_t seed = 14695981039346656037ULL) noexcept {
  std::uint64_t hash = seed;
  for (const char c : text) {
    hash ^= static_cast<std::uint8_t>(c);
    hash *= 1099511628211ULL;
  }
  return hash;
}

namespace detail {

// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, as Redis Cluster specifies.
constexpr std::array<std::uint16_t, 256> make_crc16_table() {
  std::array<std::uint16_t, 256> table{};
  for (unsigned byte = 0; byte < 256; ++byte) {
    auto crc = static_cast<std::uint16_t>(byte << 8U);
    for (int bit = 0; bit < 8; ++bit) {
      crc = static_cast<std::uint16_t>((crc & 0x8000U) != 0 ? (crc << 1U) ^ 0x1021U : crc << 1U);
    }
    table[byte] = crc;
  }
  return table;
}

inline constexpr auto crc16_table = make_crc16_table();

} // namespace detail

/// CRC16-CCITT (XMODEM) of `data`, the checksum Redis Cluster takes for key slots (and
/// Python's `binascii.crc_hqx(data, 0)`): `crc16("123456789") == 0x31C3`.
constexpr std::uint16_t crc16(std::string_view data) noexcept {
  std::uint16_t crc = 0;
  for (const char c : data) {
    const auto index = static_cast<std::uint8_t>((crc >> 8U) ^ static_cast<std::uint8_t>(c));
    crc = static_cast<std::uint16_t>((crc << 8U) ^ detail::crc16_table[index]);
  }
  return crc;
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
/// `<prefix>{<tag>}:<period>:<window id>`, e.g. `trans:limit:{channel}:day:20211111`,
/// a hash with one field per dimension (`Ali+Deduct+cmb`) whose value is `<count>:<amount>`.
/// All windows of one counter tag share a slot, so one script updates day and month together.
///
/// The tag is the counter name with one bucket (the default, `buckets() == 1`), or
/// `<bucket>:<counter>` with several: a counter's dimensions are then spread over `buckets()`
/// hashes, `bucket_of(dimension)` each, so one counter's windows spread statistically over the
/// cluster masters (N buckets over M masters: N >= 16 * M reaches every master in practice) and
/// each hash stays small (listpack-encoded). A counter name never contains ':' and a bucket
/// is digits only, so two counters' tags never meet (nor a cap's, `cap:<cap>`). Every other
/// key of a counter (holds, reports, audit, corrections, cluster share records) takes the tag
/// of the bucket it serves: pass `tag(counter, dimension)` where these functions say
/// `counter`. The bucket count is fixed per key prefix: every writer and reader of one prefix
/// must use the same, or they read and write different hashes.
class CounterKeys {
public:
  /// The prefix when none is given.
  static constexpr std::string_view default_prefix = "trans:limit:";
  /// The most buckets a counter may be spread over (the number of cluster slots).
  static constexpr std::uint32_t max_buckets = 16384;

  /// Throws `Error` (invalid_argument) naming a bad prefix, or a bucket count outside
  /// 1..`max_buckets`.
  explicit CounterKeys(std::string prefix = std::string(default_prefix), std::uint32_t buckets = 1)
      : prefix_(std::move(prefix)), buckets_(buckets) {
    validate_key_prefix(prefix_);
    if (buckets_ < 1 || buckets_ > max_buckets) {
      throw Error(errc::invalid_argument, "counter_buckets " + std::to_string(buckets_) +
                                              " must be from 1 to " + std::to_string(max_buckets));
    }
  }

  /// Throws `Error` (invalid_argument) unless `counter` is a valid counter name: a key part
  /// that may contain '+' (so a rule's shape `channel+transType+dept` can name its counter).
  static void validate_counter_name(std::string_view counter) {
    validate_key_part("counter name", counter, "+");
  }

  /// The number of buckets each counter's dimensions are spread over (1..`max_buckets`).
  std::uint32_t buckets() const noexcept { return buckets_; }

  /// The bucket of a dimension (its field text, `Ali+Deduct+cmb`):
  /// `crc16(dimension) % 16384 % buckets()`, which is what `redis-cli CLUSTER KEYSLOT
  /// <dimension>` prints, modulo `buckets()`. Always 0 with one bucket.
  std::uint32_t bucket_of(std::string_view dimension) const noexcept {
    return buckets_ == 1 ? 0 : crc16(dimension) % max_buckets % buckets_;
  }

  /// The tag of bucket `bucket` of `counter`: the counter name itself with one bucket, else
  /// `<bucket>:<counter>`. `counter` must have been validated.
  std::string bucket_tag(std::string_view counter, std::uint32_t bucket) const {
    if (buckets_ == 1) {
      return std::string(counter);
    }
    std::string tag = std::to_string(bucket);
    tag.reserve(tag.size() + 1 + counter.size());
    tag.append(1, ':').append(counter);
    return tag;
  }

  /// The tag of the bucket that holds `dimension` of `counter`: what the key functions below
  /// take as `counter`.
  std::string tag(std::string_view counter, std::string_view dimension) const {
    return bucket_tag(counter, bucket_of(dimension));
  }

  /// The hash of `counter` (a counter tag, see `tag`) for one window. `counter` must have
  /// been validated.
  std::string window(std::string_view counter, Period period, std::string_view window_id) const {
    std::string rest;
    const std::string_view period_name = to_string(period);
    rest.reserve(period_name.size() + window_id.size() + 2);
    rest.append(1, ':').append(period_name).append(1, ':').append(window_id);
    return tagged_key(prefix_, counter, rest);
  }

  /// The idempotency record of a limits transaction: `<prefix>tx:{<record id>}` (see
  /// `record_id`). `id` must have been validated.
  std::string transaction(std::string_view id) const {
    const std::string named = record_id(id);
    std::string key;
    key.reserve(prefix_.size() + named.size() + 5);
    key.append(prefix_).append("tx:{").append(named).append(1, '}');
    return key;
  }

  /// On a Redis Cluster, the record of the share of a transaction whose counters live in the
  /// slot of `counter`: `<prefix>{<counter>}:tx:<record id>`.
  std::string transaction_share(std::string_view counter, std::string_view id) const {
    return tagged_key(prefix_, counter, std::string(":tx:").append(record_id(id)));
  }

  /// How a transaction's record keys name it: the id itself up to 23 bytes; a longer id (a
  /// UUID, say) as `#` and 22 base64url digits of the first 128 bits of its SHA-256, so that the
  /// key stays within the 44 bytes Redis keeps in its smallest allocation (a record costs 16
  /// bytes less). A record id of 23 bytes is its own record id, so applying it twice changes
  /// nothing (the cluster sweep reads record ids back from keys).
  static std::string record_id(std::string_view id);

  /// The set of open reservations holding quota in the window hash `window` (a key of
  /// `window`): `<window>:holds`, a sorted set scored by hold expiry, in the window's slot.
  /// Each member holds quota in this window only, so releasing it touches no other key.
  static std::string window_holds(std::string_view window) {
    return std::string(window).append(":holds");
  }

  /// The cluster slot's hash tag of `counter` (a counter tag, see `tag`): `{<counter>}`, the
  /// part of every key of `counter` that Redis Cluster hashes.
  static std::string slot_tag(std::string_view counter) {
    return std::string(1, '{').append(counter).append(1, '}');
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
  std::uint32_t buckets_;
};

} // namespace limitcounter
