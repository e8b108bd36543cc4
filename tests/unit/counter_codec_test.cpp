#include <catch2/catch.hpp>

#include <limitcounter/error.hpp>

#include "limit_counter/counter_codec.hpp"

using limitcounter::errc;
using limitcounter::Error;
using limitcounter::Reply;
using limitcounter::Usage;
using limitcounter::detail::decode_counter_add;
using limitcounter::detail::parse_counter_value;

TEST_CASE("counter values parse as <count>:<amount>", "[codec]") {
  CHECK(parse_counter_value("3:45000") == Usage{3, 45000});
  CHECK(parse_counter_value("0:0") == Usage{0, 0});
  CHECK(parse_counter_value("9007199254740991:9007199254740991") ==
        Usage{9007199254740991, 9007199254740991});
  for (const char* bad :
       {"", "3", "3:", ":5", "a:1", "1:b", "1:2:3", "1 :2", "99999999999999999999:1"}) {
    INFO(bad);
    CHECK_THROWS_MATCHES(
        parse_counter_value(bad), Error,
        Catch::Predicate<Error>([](const Error& e) { return e.code() == errc::protocol_error; }));
  }
}

TEST_CASE("counter_add replies decode into one usage per window", "[codec]") {
  const Reply ok = Reply::array({Reply::string("ok"), Reply::integer(1), Reply::integer(100),
                                 Reply::integer(7), Reply::integer(900)});
  const auto totals = decode_counter_add(ok, 2, "channel Ali");
  REQUIRE(totals.size() == 2);
  CHECK(totals[0] == Usage{1, 100});
  CHECK(totals[1] == Usage{7, 900});

  CHECK_THROWS_AS(decode_counter_add(ok, 3, "x"), Error); // wrong window count

  const Reply overflow = Reply::array({Reply::string("overflow"), Reply::integer(2),
                                       Reply::string("1"), Reply::string("9007199254740992")});
  try {
    decode_counter_add(overflow, 2, "channel Ali+Deduct+cmb");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == errc::precision_overflow);
    CHECK(e.outcome() == limitcounter::Outcome::failed);
    CHECK_THAT(e.what(),
               Catch::Contains("channel Ali+Deduct+cmb") && Catch::Contains("9007199254740992"));
  }
}
