#include <catch2/catch.hpp>

#include <limitcounter/dimension.hpp>
#include <limitcounter/keys.hpp>

using limitcounter::CounterKeys;
using limitcounter::Dimension;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::Period;

namespace {

// Runs `action`, expects an invalid_argument Error whose message contains `needle`.
template <typename Action> void require_invalid(Action&& action, const std::string& needle) {
  try {
    action();
    FAIL("no error for " << needle);
  } catch (const Error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK_THAT(e.what(), Catch::Contains(needle));
  }
}

} // namespace

TEST_CASE("a dimension joins its parts with '+'", "[keys]") {
  const Dimension dimension{"Ali", "Deduct", "cmb"};
  CHECK(dimension.field() == "Ali+Deduct+cmb");
  CHECK(dimension.parts() == std::vector<std::string>{"Ali", "Deduct", "cmb"});
  CHECK(Dimension{"m-1"}.field() == "m-1");
  CHECK(Dimension(std::vector<std::string>{"a", "b"}) == Dimension{"a", "b"});
  CHECK(Dimension{"\xe6\x8b\x9b\xe5\x95\x86"}.field() ==
        "\xe6\x8b\x9b\xe5\x95\x86"); // UTF-8 is fine
}

TEST_CASE("bad dimension parts are refused with the part named", "[keys]") {
  const std::string long_part(65, 'x');
  const std::vector<std::pair<std::string, std::string>> bad{
      {"", "is empty"},
      {long_part, "longer than 64 bytes"},
      {"Ali+Deduct", "\"Ali+Deduct\" contains a separator"},
      {"a:b", "\"a:b\" contains a separator"},
      {"{cmb}", "brace"},
      {"c}", "brace"},
      {"cm b", "whitespace"},
      {"cm\tb", "\"cm\\x09b\" contains a control character"},
      {std::string("nul\0x", 5), "control character"},
      {"\x7f", "control character"},
      {"\xff\xfe", "\"\\xff\\xfe\" is not valid UTF-8"},
      {"\xc0\xaf", "not valid UTF-8"},     // overlong '/'
      {"\xed\xa0\x80", "not valid UTF-8"}, // a UTF-16 surrogate
      {"\xe6\x8b", "not valid UTF-8"},     // cut short
  };
  for (const auto& [part, needle] : bad) {
    INFO("part " << part);
    require_invalid([&] { Dimension{"Ali", part}; }, needle);
  }
  require_invalid([] { Dimension(std::vector<std::string>{}); }, "at least one part");
  CHECK(Dimension{std::string(64, 'x')}.field().size() == 64);
}

TEST_CASE("counter window keys carry the counter as hash tag", "[keys]") {
  const CounterKeys keys;
  CHECK(keys.window("channel", Period::day, "20211111") == "trans:limit:{channel}:day:20211111");
  CHECK(keys.window("channel+transType+dept", Period::week, "2021-W45") ==
        "trans:limit:{channel+transType+dept}:week:2021-W45");
  CHECK(CounterKeys("pay:").window("merchant", Period::month, "202111") ==
        "pay:{merchant}:month:202111");
  CHECK(CounterKeys("").window("m", Period::year, "2021") == "{m}:year:2021");
}

TEST_CASE("bad key prefixes and counter names are refused", "[keys]") {
  require_invalid([] { CounterKeys("a{b"); }, "key prefix \"a{b\"");
  require_invalid([] { CounterKeys("a b:"); }, "whitespace");
  require_invalid([] { CounterKeys::validate_counter_name("chan:nel"); }, "counter name");
  require_invalid([] { CounterKeys::validate_counter_name("{x}"); }, "brace");
  require_invalid([] { CounterKeys::validate_counter_name(""); }, "is empty");
  CounterKeys::validate_counter_name("channel+transType+dept");
}

TEST_CASE("error messages quote hostile input safely and briefly", "[keys]") {
  const std::string huge(100000, '\x01');
  try {
    Dimension{huge};
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).size() < 500);
    CHECK_THAT(e.what(), Catch::Contains("(100000 bytes)"));
  }
}
