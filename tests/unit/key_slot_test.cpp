#include <catch2/catch.hpp>

#include "redis/key_slot.hpp"

using limitcounter::detail::hash_tag;
using limitcounter::detail::key_slot;

TEST_CASE("key slots follow the Redis Cluster specification", "[cluster][slot]") {
  // Reference values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
  CHECK(key_slot("123456789") == 12739); // CRC16/XMODEM check value 0x31C3 % 16384
  CHECK(key_slot("foo") == 12182);
  CHECK(key_slot("bar") == 5061);
  CHECK(key_slot("") == 0);
}

TEST_CASE("hash tags decide the slot", "[cluster][slot]") {
  CHECK(hash_tag("trans:limit:{channel}:day:20211111") == "channel");
  CHECK(key_slot("trans:limit:{channel}:day:20211111") == key_slot("x{channel}y"));
  CHECK(hash_tag("{user1000}.following") == "user1000");
  CHECK(hash_tag("foo{}{bar}") == "foo{}{bar}"); // an empty first tag: the whole key
  CHECK(hash_tag("foo{{bar}}zap") == "{bar");
  CHECK(hash_tag("foo{bar}{zap}") == "bar");
  CHECK(hash_tag("no-close{tag") == "no-close{tag");
}
