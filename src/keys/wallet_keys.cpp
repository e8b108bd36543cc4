#include <limitcounter/wallet_keys.hpp>

namespace limitcounter {

WalletKeys::WalletKeys(std::string prefix, std::uint32_t partitions)
    : prefix_(std::move(prefix)), partitions_(partitions) {
  validate_key_prefix(prefix_);
  if (partitions_ < 1 || partitions_ > 1024) {
    throw Error(errc::invalid_argument, "wallet journal partitions " + std::to_string(partitions_) +
                                            " must be from 1 to 1024");
  }
}

} // namespace limitcounter
