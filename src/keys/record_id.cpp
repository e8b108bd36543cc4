// CounterKeys::record_id: a long transaction id named by a digest in its record keys.
#include <limitcounter/keys.hpp>

#include <openssl/sha.h>

namespace limitcounter {

std::string CounterKeys::record_id(std::string_view id) {
  constexpr std::size_t longest_kept = 23;
  if (id.size() <= longest_kept) {
    return std::string(id);
  }
  // A cryptographic digest: two ids that share a record would share a decision, so no one
  // must be able to make two ids collide (FNV-1a could be).
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(id.data()), id.size(), digest);
  static constexpr char alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string named(1, '#');
  // 22 digits of 6 bits: the first 132 bits, of which the last digit's low bits are zero
  unsigned bits = 0;
  int held = 0;
  for (std::size_t at = 0; named.size() < longest_kept; ++at) {
    bits = (bits << 8) | digest[at];
    held += 8;
    while (held >= 6 && named.size() < longest_kept) {
      held -= 6;
      named.push_back(alphabet[(bits >> held) & 0x3F]);
    }
  }
  return named;
}

} // namespace limitcounter
