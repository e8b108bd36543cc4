#include <catch2/catch.hpp>

#include "shared/msgpack.hpp"

using limitcounter::detail::append_msgpack_array;
using limitcounter::detail::append_msgpack_int;
using limitcounter::detail::append_msgpack_string;

namespace {

std::string int_bytes(std::int64_t value) {
  std::string out;
  append_msgpack_int(out, value);
  return out;
}

std::string array_head(std::size_t size) {
  std::string out;
  append_msgpack_array(out, size);
  return out;
}

std::string string_bytes(const std::string& text) {
  std::string out;
  append_msgpack_string(out, text);
  return out;
}

} // namespace

TEST_CASE("MessagePack integers take the shortest form cmsgpack reads back", "[msgpack]") {
  CHECK(int_bytes(0) == std::string(1, '\0'));
  CHECK(int_bytes(127) == "\x7f");
  CHECK(int_bytes(-1) == "\xff");
  CHECK(int_bytes(-32) == "\xe0");
  // past the fixints: int64, big-endian
  CHECK(int_bytes(128) == std::string("\xd3\0\0\0\0\0\0\0\x80", 9));
  CHECK(int_bytes(-33) == std::string("\xd3\xff\xff\xff\xff\xff\xff\xff\xdf", 9));
  CHECK(int_bytes(9007199254740991) == std::string("\xd3\x00\x1f\xff\xff\xff\xff\xff\xff", 9));
}

TEST_CASE("MessagePack arrays announce their size", "[msgpack]") {
  CHECK(array_head(0) == "\x90");
  CHECK(array_head(15) == "\x9f");
  CHECK(array_head(16) == std::string("\xdc\x00\x10", 3));
  CHECK(array_head(65535) == std::string("\xdc\xff\xff", 3));
  CHECK(array_head(65536) == std::string("\xdd\x00\x01\x00\x00", 5));
}

TEST_CASE("MessagePack strings announce their length in the fewest bytes", "[msgpack]") {
  CHECK(string_bytes("") == "\xa0");
  CHECK(string_bytes("cmb:m1") == "\xa6"
                                  "cmb:m1");
  const std::string s31(31, 'a');
  const std::string s32(32, 'b');
  const std::string s255(255, 'c');
  const std::string s256(256, 'd');
  const std::string s65535(65535, 'f');
  const std::string s65536(65536, 'e');
  CHECK(string_bytes(s31) == "\xbf" + s31);
  CHECK(string_bytes(s32) == "\xd9\x20" + s32);
  CHECK(string_bytes(s255) == "\xd9\xff" + s255);
  CHECK(string_bytes(s256) == std::string("\xda\x01\x00", 3) + s256);
  CHECK(string_bytes(s65535) == std::string("\xda\xff\xff", 3) + s65535);
  CHECK(string_bytes(s65536) == std::string("\xdb\x00\x01\x00\x00", 5) + s65536);
}
