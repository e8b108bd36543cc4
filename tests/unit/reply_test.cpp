#include <catch2/catch.hpp>

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
