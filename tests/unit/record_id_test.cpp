#include <catch2/catch.hpp>

#include <limitcounter/keys.hpp>

using limitcounter::CounterKeys;

TEST_CASE("a long transaction id is named by a digest in its record keys", "[keys]") {
  const CounterKeys keys("trans:limit:");
  // up to 23 bytes: the id itself
  CHECK(keys.transaction("pay-20261123-000000001") == "trans:limit:tx:{pay-20261123-000000001}");
  CHECK(CounterKeys::record_id("12345678901234567890123") == "12345678901234567890123");
  // longer (a UUID): '#' and 22 base64url digits of its SHA-256; the key fits in 44 bytes
  const std::string uuid = "3f2504e0-4f89-11d3-9a0c-0305e82c3301";
  const std::string named = CounterKeys::record_id(uuid);
  CHECK(named.size() == 23);
  CHECK(named.front() == '#');
  CHECK(named.find_first_not_of(
            "#ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") ==
        std::string::npos);
  CHECK(keys.transaction(uuid) == "trans:limit:tx:{" + named + "}");
  CHECK(keys.transaction(uuid).size() <= 44);
  CHECK(keys.transaction_share("merchant", uuid) == "trans:limit:{merchant}:tx:" + named);
  // the digits are base64url of the digest's first bytes (computed with Python's hashlib)
  CHECK(named == "#0b-vSv9lPLJ5hLfZeOUafU");
  // stable, and its own record id (the cluster sweep reads record ids back from keys)
  CHECK(CounterKeys::record_id(uuid) == named);
  CHECK(CounterKeys::record_id(named) == named);
  // another id, another name
  CHECK(CounterKeys::record_id("3f2504e0-4f89-11d3-9a0c-0305e82c3302") != named);
}
