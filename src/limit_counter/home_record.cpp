#include "limit_counter/home_record.hpp"

namespace limitcounter::detail {

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
