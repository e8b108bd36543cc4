#include "limit_counter/home_record.hpp"

#include <charconv>
#include <cstdint>

namespace limitcounter::detail {

std::string home_fingerprint(std::string_view digest_hex, std::string_view amount) {
  std::uint64_t digest = 0;
  const auto parsed =
      std::from_chars(digest_hex.data(), digest_hex.data() + digest_hex.size(), digest, 16);
  std::string text;
  if (digest_hex.size() != 16 || parsed.ec != std::errc() ||
      parsed.ptr != digest_hex.data() + digest_hex.size()) {
    text = digest_hex;
  } else {
    static constexpr char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    for (int shift = 60; shift >= 0; shift -= 6) { // 11 digits of 6 bits, the first of 4
      text += alphabet[(digest >> shift) & 0x3FU];
    }
  }
  text.append(1, ':').append(amount);
  return text;
}

void name_home_fields(std::map<std::string, std::string>& fields) {
  static const std::map<std::string, std::string> states{
      {"p", "pending"},   {"c", "consumed"},  {"d", "denied"},  {"r", "reserved"},
      {"f", "confirmed"}, {"x", "cancelled"}, {"e", "expired"}, {"v", "voided"}};
  const auto state = states.find(fields["s"]);
  fields["state"] = state != states.end() ? state->second : fields["s"];
  const std::string& fingerprint = fields["f"];
  fields["amount"] =
      fields.count("a") ? fields["a"] : fingerprint.substr(fingerprint.rfind(':') + 1);
  fields["refunded"] = fields.count("r") ? fields["r"] : "0";
  if (fields.count("h")) {
    fields["hexp"] = fields["h"];
  }
}

} // namespace limitcounter::detail
