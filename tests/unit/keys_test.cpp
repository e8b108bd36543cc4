#include <catch2/catch.hpp>

#include <algorithm>

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

TEST_CASE("crc16 is the CRC16 of Redis Cluster (XMODEM)", "[keys][buckets]") {
  static_assert(limitcounter::crc16("123456789") == 0x31C3, "the check value of CRC-16/XMODEM");
  CHECK(limitcounter::crc16("") == 0);
  CHECK(limitcounter::crc16("foo") % 16384 == 12182);     // CLUSTER KEYSLOT foo
  CHECK(limitcounter::crc16("Ali+Deduct+cmb") == 0x02F7); // binascii.crc_hqx(b"...", 0)
}

TEST_CASE("one bucket keeps today's keys; several put the bucket before the counter",
          "[keys][buckets]") {
  const CounterKeys one;
  CHECK(one.buckets() == 1);
  CHECK(one.bucket_of("Ali+Deduct+cmb") == 0);
  CHECK(one.tag("channel", "Ali+Deduct+cmb") == "channel");
  CHECK(one.window(one.tag("channel", "Ali"), Period::day, "20211111") ==
        "trans:limit:{channel}:day:20211111");

  const CounterKeys spread("p:", 1024);
  // 0x02F7 = 759; 759 % 16384 % 1024 = 759
  CHECK(spread.bucket_of("Ali+Deduct+cmb") == 759);
  CHECK(spread.tag("channel+transType+dept", "Ali+Deduct+cmb") == "759:channel+transType+dept");
  CHECK(spread.window(spread.tag("channel", "Ali+Deduct+cmb"), Period::month, "202111") ==
        "p:{759:channel}:month:202111");
  CHECK(CounterKeys::window_holds(spread.window(spread.bucket_tag("channel", 7), Period::day,
                                                "20211101")) == "p:{7:channel}:day:20211101:holds");
  CHECK(CounterKeys::slot_tag(spread.bucket_tag("channel", 7)) == "{7:channel}");
  CHECK(spread.audit(spread.bucket_tag("channel", 7)) == "p:{7:channel}:audit");
  CHECK(spread.local_reports(spread.bucket_tag("channel", 7)) == "p:{7:channel}:reports");
  CHECK(spread.transaction_share(spread.bucket_tag("c", 0), "t1") == "p:{0:c}:tx:t1");

  // every bucket of 64 gets some of 1,000 dimensions, and none is past the count
  const CounterKeys sixty_four("p:", 64);
  std::vector<int> per_bucket(64, 0);
  for (int i = 0; i < 1000; ++i) {
    const auto bucket = sixty_four.bucket_of("Ali+d" + std::to_string(i));
    REQUIRE(bucket < 64);
    ++per_bucket[bucket];
  }
  CHECK(std::count(per_bucket.begin(), per_bucket.end(), 0) == 0);
  // a counter name never holds ':', so "<bucket>:<counter>" never meets another counter's tag
  // nor a cap's ("cap:<cap>": a bucket is digits)
  require_invalid([] { CounterKeys::validate_counter_name("3:channel"); }, "separator");
}

TEST_CASE("a bucket count outside 1..16384 is refused", "[keys][buckets]") {
  require_invalid([] { CounterKeys("p:", 0); }, "counter_buckets 0 must be from 1 to 16384");
  require_invalid([] { CounterKeys("p:", 16385); }, "counter_buckets 16385");
  CHECK(CounterKeys("p:", 16384).bucket_of("x") == limitcounter::crc16("x") % 16384);
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
