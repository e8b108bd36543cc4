#pragma once
// Keys of the wallets. A user's keys share the hash tag of the user's journal
// partition, `{j<N>}`, so that one script can deduct and append the journal event.

#include <cstdint>
#include <string>
#include <string_view>

#include <limitcounter/keys.hpp>
#include <limitcounter/red_packet_keys.hpp>

namespace limitcounter {

/// `<prefix>{j<N>}:u:<user>` (account hash), `...:o:<user>:<order>` (order record),
/// `...:pending:<user>` (the user's unpersisted orders), and per partition N:
/// `<prefix>{j<N>}:journal` (stream) and `<prefix>{j<N>}:pending` (all unpersisted orders
/// as "<user>:<order>"). Default prefix `wallet:`.
class WalletKeys {
public:
  static constexpr std::string_view default_prefix = "wallet:";

  /// Throws `Error` (invalid_argument) for a bad prefix or a partition count outside 1..1024.
  WalletKeys(std::string prefix, std::uint32_t partitions);

  std::uint32_t partitions() const noexcept { return partitions_; }
  /// The partition of a user: stable_hash(user) % partitions.
  std::uint32_t partition_of(std::string_view user) const noexcept {
    return static_cast<std::uint32_t>(stable_hash(user) % partitions_);
  }

  std::string account(std::string_view user) const { return user_key(user, ":u:", user, {}); }
  std::string order(std::string_view user, std::string_view order) const {
    return user_key(user, ":o:", user, order);
  }
  std::string user_pending(std::string_view user) const {
    return user_key(user, ":pending:", user, {});
  }
  std::string journal(std::uint32_t partition) const {
    return tagged_key(prefix_, tag(partition), ":journal");
  }
  std::string pending(std::uint32_t partition) const {
    return tagged_key(prefix_, tag(partition), ":pending");
  }

private:
  static std::string tag(std::uint32_t partition) { return "j" + std::to_string(partition); }
  std::string user_key(std::string_view user, std::string_view kind, std::string_view first,
                       std::string_view second) const {
    std::string rest(kind);
    rest.append(first);
    if (!second.empty()) {
      rest.append(1, ':').append(second);
    }
    return tagged_key(prefix_, tag(partition_of(user)), rest);
  }

  std::string prefix_;
  std::uint32_t partitions_;
};

} // namespace limitcounter
