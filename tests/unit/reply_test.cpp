#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include <limitcounter/error.hpp>
#include <limitcounter/reply.hpp>

using limitcounter::errc;
using limitcounter::Error;
using limitcounter::Reply;

TEST_CASE("replies give their values and refuse the wrong type", "[reply]") {
  CHECK(Reply::integer(-7).as_integer() == -7);
  CHECK(Reply::string("42").to_int64() == 42);
  CHECK(Reply::integer(5).to_int64() == 5);
  CHECK(Reply::status("OK").as_string() == "OK");
  CHECK(Reply::error("ERR x").is_error());
  CHECK(Reply().is_nil());
  const Reply array = Reply::array({Reply::integer(1), Reply::string("a")});
  CHECK(array.at(1).as_string() == "a");

  const auto protocol_error =
      Catch::Predicate<Error>([](const Error& e) { return e.code() == errc::protocol_error; });
  CHECK_THROWS_MATCHES(Reply::string("1").as_integer(), Error, protocol_error);
  CHECK_THROWS_MATCHES(Reply::integer(1).as_string(), Error, protocol_error);
  CHECK_THROWS_MATCHES(Reply::string("4x").to_int64(), Error, protocol_error);
  CHECK_THROWS_MATCHES(Reply::string("").to_int64(), Error, protocol_error);
  CHECK_THROWS_MATCHES(Reply::string("99999999999999999999").to_int64(), Error, protocol_error);
  CHECK_THROWS_MATCHES(Reply().as_array(), Error, protocol_error);
  CHECK_THROWS_MATCHES(array.at(2), Error, protocol_error);
}

TEST_CASE("replies render briefly for messages", "[reply]") {
  CHECK(Reply::array({Reply::integer(1), Reply(), Reply::string("x\n")}).debug_string() ==
        "[(integer) 1, (nil), \"x\\x0a\"]");
  std::vector<Reply> many(20, Reply::integer(0));
  CHECK_THAT(Reply::array(many).debug_string(), Catch::Contains("(20 elements)"));
}

TEST_CASE("to_int64 parses strictly", "[reply]") {
  CHECK(Reply::string("-42").to_int64() == -42);
  CHECK(Reply::string("0").to_int64() == 0);
  CHECK(Reply::string("9223372036854775807").to_int64() == INT64_MAX);
  CHECK(Reply::string("-9223372036854775808").to_int64() == INT64_MIN);
  for (const char* bad : {"+1", " 1", "1 ", "1.0", "1e3", "0x10", "--1", "-", "9223372036854775808",
                          "-9223372036854775809", "1\n"}) {
    INFO(bad);
    CHECK_THROWS_AS(Reply::string(bad).to_int64(), Error);
  }
  // only integer and string replies hold numbers
  CHECK_THROWS_AS(Reply::status("1").to_int64(), Error);
  CHECK_THROWS_AS(Reply::error("1").to_int64(), Error);
  CHECK_THROWS_AS(Reply().to_int64(), Error);
  CHECK_THROWS_AS(Reply::array({Reply::integer(1)}).to_int64(), Error);
}

TEST_CASE("type errors name the expected and the actual reply", "[reply]") {
  const auto message_of = [](auto&& action) {
    try {
      action();
    } catch (const Error& e) {
      CHECK(e.code() == errc::protocol_error);
      return std::string(e.what());
    }
    FAIL("no error");
    return std::string();
  };
  std::string m = message_of([] { Reply::string("abc").as_integer(); });
  CHECK_THAT(m, Catch::Contains("integer") && Catch::Contains("\"abc\""));
  m = message_of([] { Reply::error("WRONGTYPE no").as_array(); });
  CHECK_THAT(m, Catch::Contains("array") && Catch::Contains("(error)") &&
                    Catch::Contains("WRONGTYPE"));
  m = message_of([] { Reply().as_string(); });
  CHECK_THAT(m, Catch::Contains("(nil)"));
  m = message_of([] { Reply::string("12x").to_int64(); });
  CHECK_THAT(m, Catch::Contains("\"12x\""));
  m = message_of([] { Reply::integer(3).at(0); });
  CHECK_THAT(m, Catch::Contains("(integer) 3"));
  m = message_of([] { Reply::array({}).at(0); });
  CHECK_THAT(m, Catch::Contains("no element 0"));
}

TEST_CASE("every reply type keeps its value", "[reply]") {
  CHECK(Reply().type() == Reply::Type::nil);
  CHECK(Reply::integer(1).type() == Reply::Type::integer);
  CHECK(Reply::string("").type() == Reply::Type::string);
  CHECK(Reply::status("OK").type() == Reply::Type::status);
  CHECK(Reply::error("ERR").type() == Reply::Type::error);
  CHECK(Reply::array({}).type() == Reply::Type::array);
  CHECK(Reply::error("ERR boom").as_string() == "ERR boom");
  CHECK_FALSE(Reply::status("OK").is_error());
  CHECK(Reply::array({}).as_array().empty());
  const std::string binary("a\0b\r\n", 5);
  CHECK(Reply::string(binary).as_string() == binary);
  const Reply nested =
      Reply::array({Reply::array({Reply::integer(7), Reply()}), Reply::status("x")});
  CHECK(nested.at(0).at(0).as_integer() == 7);
  CHECK(nested.at(0).at(1).is_nil());
  CHECK(nested.debug_string() == "[[(integer) 7, (nil)], (status) \"x\"]");
}
