#include <catch2/catch.hpp>

#include "redis/resp.hpp"

using limitcounter::detail::append_resp_command;

TEST_CASE("commands encode as RESP arrays of bulk strings", "[resp]") {
  std::string out;
  append_resp_command(out, {"HGET", "k", ""});
  CHECK(out == "*3\r\n$4\r\nHGET\r\n$1\r\nk\r\n$0\r\n\r\n");
  out.clear();
  const std::string binary("a\r\n\0b", 5);
  append_resp_command(out, {"SET", binary});
  static const char expected[] = "*2\r\n$3\r\nSET\r\n$5\r\na\r\n\0b\r\n";
  CHECK(out == std::string(expected, sizeof(expected) - 1));
  append_resp_command(out, {"PING"}); // appends: a pipeline is several in a row
  CHECK(out.substr(sizeof(expected) - 1) == "*1\r\n$4\r\nPING\r\n");
  const std::string big(100000, 'x');
  out.clear();
  append_resp_command(out, {big});
  CHECK(out.substr(0, 14) == "*1\r\n$100000\r\nx");
  CHECK(out.size() == 4 + 9 + 100000 + 2);
}
