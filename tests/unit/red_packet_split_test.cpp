#include <catch2/catch.hpp>

#include <limits>
#include <numeric>

#include <limitcounter/error.hpp>
#include <limitcounter/red_packet_split.hpp>

#include "red_packets/red_packet_codec.hpp"

using limitcounter::errc;
using limitcounter::Error;
using limitcounter::split;
using limitcounter::SplitOptions;

namespace {

void check_split(std::int64_t total, std::int64_t count, SplitOptions options) {
  INFO("total " << total << " count " << count << " guaranteed " << options.guaranteed_percent);
  const auto amounts = split(total, count, options);
  REQUIRE(amounts.size() == static_cast<std::size_t>(count));
  CHECK(std::accumulate(amounts.begin(), amounts.end(), std::int64_t{0}) == total);
  for (const auto amount : amounts) {
    REQUIRE(amount >= options.min_amount);
    REQUIRE(amount <= total); // the sum below could wrap around and still match

    if (options.max_amount) {
      REQUIRE(amount <= *options.max_amount);
    }
  }
}

} // namespace

TEST_CASE("splits are exact, bounded and complete over a grid", "[redpacket][split]") {
  SplitOptions options;
  options.seed = 7;
  for (const int guaranteed : {0, 50, 100}) {
    options.guaranteed_percent = guaranteed;
    options.max_amount.reset();
    check_split(2, 2, options);
    check_split(1, 1, options);
    check_split(10000, 1, options);
    check_split(500, 500, options); // N × min
    check_split(10'000'000, 10'000, options);
    check_split(99'999, 7, options);
    options.max_amount = 3;
    check_split(300, 100, options); // N × cap: all equal to the cap
    check_split(250, 100, options);
    options.max_amount = 2000;
    check_split(10000, 10, options);
  }
  options.guaranteed_percent = 0;
  options.max_amount = 3;
  const auto capped = split(300, 100, options);
  CHECK(std::all_of(capped.begin(), capped.end(), [](auto a) { return a == 3; }));
}

TEST_CASE("impossible splits are errors naming the values", "[redpacket][split]") {
  const auto refused = [](std::int64_t total, std::int64_t count, SplitOptions options,
                          const std::string& needle) {
    try {
      split(total, count, options);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(needle));
    }
  };
  refused(1, 3, {}, "total 1 cannot give 3 packets");
  refused(100, 0, {}, "count 0");
  refused(0, 1, {}, "0");
  SplitOptions capped;
  capped.max_amount = 9;
  refused(100, 10, capped, "max_amount 9 is too small");
  SplitOptions bad_min;
  bad_min.min_amount = 0;
  refused(100, 10, bad_min, "min_amount 0");
  SplitOptions bad_percent;
  bad_percent.guaranteed_percent = 101;
  refused(100, 10, bad_percent, "guaranteed_percent 101");
  CHECK_THROWS_MATCHES(
      split(std::int64_t{1} << 53, 2), Error,
      Catch::Predicate<Error>([](const Error& e) { return e.code() == errc::precision_overflow; }));
}

TEST_CASE("huge totals split without overflow; unrepresentable ones are refused",
          "[redpacket][split]") {
  constexpr std::int64_t max_exact = (std::int64_t{1} << 53) - 1;
  SplitOptions options;
  options.seed = 11;
  // near 2^53: count x total passes INT64_MAX, and the bound "what the others can take" must
  // not wrap (it did, and amounts above the total came out)
  check_split(max_exact, 2000, options);
  check_split(max_exact, 1'000'000, options);
  check_split(max_exact - 12'345, 3, options);
  options.max_amount = std::numeric_limits<std::int64_t>::max(); // "no cap", spelled out
  check_split(max_exact, 2, options);
  check_split(max_exact, 5000, options);
  options.guaranteed_percent = 50;
  check_split(max_exact, 5000, options);
  // near INT64_MAX: not representable in Redis Lua numbers, refused naming the value
  for (const std::int64_t total : {max_exact + 1, std::numeric_limits<std::int64_t>::max() - 1,
                                   std::numeric_limits<std::int64_t>::max()}) {
    try {
      split(total, 2);
      FAIL("accepted " << total);
    } catch (const Error& e) {
      CHECK(e.code() == errc::precision_overflow);
      CHECK_THAT(e.what(), Catch::Contains(std::to_string(total)));
    }
  }
}

TEST_CASE("every position's mean is the fair share", "[redpacket][split][statistics]") {
  constexpr int runs = 100'000;
  std::vector<double> sums(10, 0.0);
  std::vector<double> spread(2, 0.0);
  for (const int guaranteed : {0, 60}) {
    std::fill(sums.begin(), sums.end(), 0.0);
    SplitOptions options;
    options.guaranteed_percent = guaranteed;
    double squares = 0;
    for (int run = 0; run < runs; ++run) {
      options.seed =
          static_cast<std::uint64_t>(run) * 7919U + static_cast<std::uint64_t>(guaranteed);
      const auto amounts = split(10'000, 10, options);
      for (std::size_t i = 0; i < amounts.size(); ++i) {
        sums[i] += static_cast<double>(amounts[i]);
        squares +=
            (static_cast<double>(amounts[i]) - 1000.0) * (static_cast<double>(amounts[i]) - 1000.0);
      }
    }
    for (std::size_t i = 0; i < sums.size(); ++i) {
      INFO("guaranteed " << guaranteed << " position " << i);
      CHECK(sums[i] / runs == Approx(1000.0).epsilon(0.01));
    }
    spread[guaranteed == 0 ? 0 : 1] = squares;
  }
  CHECK(spread[1] < spread[0] / 4); // guaranteeing 60 % of the mean narrows the spread
}

TEST_CASE("grab and take replies decode", "[redpacket][codec]") {
  using limitcounter::GrabResult;
  using limitcounter::Reply;
  using namespace limitcounter::detail;
  const auto granted =
      decode_grab(Reply::array({Reply::string("granted"), Reply::integer(42)}), "p");
  CHECK(granted.status == GrabResult::Status::granted);
  CHECK_FALSE(granted.replayed);
  CHECK(granted.amount == 42);
  // a winner's grab again: what it won then, marked replayed
  const auto won_before =
      decode_grab(Reply::array({Reply::string("already"), Reply::integer(7)}), "p");
  CHECK(won_before.status == GrabResult::Status::granted);
  CHECK(won_before.replayed);
  CHECK(won_before.amount == 7);
  CHECK(decode_grab(Reply::array({Reply::string("sold_out")}), "p").status ==
        GrabResult::Status::sold_out);
  CHECK_THROWS_MATCHES(
      decode_grab(Reply::array({Reply::string("unknown")}), "p1"), Error,
      Catch::Predicate<Error>([](const Error& e) { return e.code() == errc::not_found; }));
  const auto tasks =
      decode_take(Reply::array({Reply::string("pk:u1"), Reply::string("5"), Reply::integer(2),
                                Reply::integer(9), Reply::string("3:A:bhttps://x/y:z")}),
                  3);
  REQUIRE(tasks.size() == 1);
  CHECK(tasks[0].packet_id == "pk");
  CHECK(tasks[0].user_id == "u1");
  CHECK(tasks[0].attempt == 2);
  CHECK(tasks[0].lease == 9);
  CHECK(tasks[0].partition == 3);
  CHECK(tasks[0].idempotency_key() == "pk:u1");
  CHECK(tasks[0].nickname == "A:b");
  CHECK(tasks[0].avatar_url == "https://x/y:z");
  CHECK_THROWS_AS(decode_take(Reply::array({Reply::string("x")}), 0), Error);
}

TEST_CASE("close replies, display data and the content digest", "[redpacket][codec]") {
  using limitcounter::Reply;
  using limitcounter::UserDisplay;
  using namespace limitcounter::detail;
  const auto replay = decode_close(
      Reply::array({Reply::string("already"), Reply::string("50"), Reply::integer(2)}), "p");
  CHECK(replay.replayed);
  CHECK_FALSE(replay.closed_now);
  CHECK(replay.leftover == 50);
  CHECK(replay.packets_left == 2);
  CHECK_THROWS_MATCHES(
      decode_close(Reply::array({Reply::string("not_ready")}), "p9"), Error,
      Catch::Predicate<Error>([](const Error& e) { return e.code() == errc::not_found; }));

  for (const UserDisplay& display : {UserDisplay{"", ""}, UserDisplay{"n", ""},
                                     UserDisplay{"", "u:1"}, UserDisplay{"12:ab", "c"}}) {
    const UserDisplay back = decode_display(encode_display(display));
    CHECK(back.nickname == display.nickname);
    CHECK(back.avatar_url == display.avatar_url);
  }
  CHECK(encode_display({}).empty());
  CHECK_THROWS_AS(decode_display("9:ab"), Error);
  CHECK_THROWS_AS(decode_display("x:ab"), Error);

  const std::string digest = content_digest({1, 23}, "1000", 10);
  CHECK(digest.size() == 16);
  CHECK(digest == content_digest({1, 23}, "1000", 10));
  CHECK(digest != content_digest({12, 3}, "1000", 10));
  CHECK(digest != content_digest({23, 1}, "1000", 10));
  CHECK(digest != content_digest({1, 23}, "1001", 10));
  CHECK(digest != content_digest({1, 23}, "1000", 11));
}
