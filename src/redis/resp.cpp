#include "redis/resp.hpp"

#include <charconv>

namespace limitcounter::detail {
namespace {

void append_header(std::string& out, char kind, std::size_t number) {
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof(digits), number).ptr;
  out += kind;
  out.append(digits, static_cast<std::size_t>(end - digits));
  out += "\r\n";
}

} // namespace

void append_resp_command(std::string& out, const std::vector<std::string_view>& argv) {
  std::size_t size = 16;
  for (const auto arg : argv) {
    size += arg.size() + 16;
  }
  out.reserve(out.size() + size);
  append_header(out, '*', argv.size());
  for (const auto arg : argv) {
    append_header(out, '$', arg.size());
    out.append(arg);
    out += "\r\n";
  }
}

} // namespace limitcounter::detail
