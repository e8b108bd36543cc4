// Listing: the dimensions of a window page by page (HSCAN), and a cap's usage without a take.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <variant>

#include <limitcounter/limit_counter.hpp>

#include "support/redis_server.hpp"
#include "support/topology.hpp"

using namespace std::chrono_literals;
using limitcounter::AddRequest;
using limitcounter::Clock;
using limitcounter::Dimension;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::LimitCounter;
using limitcounter::Period;
using limitcounter::TimePoint;
using limitcounter::Usage;

namespace {

// A counter on keys of its own, and a time about 400 days ahead (windows no run has touched).
struct ListingFixture {
  limitcounter::Calendar calendar{"Asia/Shanghai"};
  LimitCounter counter{limitcounter::Redis(limitcounter::testing::test_options()), calendar,
                       options()};
  TimePoint at = Clock::now() + 400 * 24h;

  static limitcounter::LimitCounterOptions options() {
    limitcounter::LimitCounterOptions options;
    options.key_prefix = limitcounter::testing::unique_prefix() + "list:";
    return options;
  }
  std::string day_id(TimePoint when) const { return calendar.window(Period::day, when).id; }
};

} // namespace

TEST_CASE_METHOD(ListingFixture,
                 "dimensions lists 1,000 dimensions of a window completely across pages",
                 "[listing][redis]") {
  std::vector<AddRequest> adds;
  for (int i = 0; i < 1000; ++i) {
    // dimension i holds i + 1 transactions and 100 * i minor units
    adds.push_back({"channel+dept",
                    Dimension{"Ali", "bank-" + std::to_string(i)},
                    {Period::day},
                    i + 1,
                    100 * i,
                    at});
  }
  for (const auto& result : counter.add_many(adds)) {
    REQUIRE(std::holds_alternative<std::vector<limitcounter::WindowUsage>>(result));
  }
  // another window and another counter must not show up
  counter.add("channel+dept", Dimension{"Ali", "bank-next-day"}, {Period::day}, 1, 1, at + 24h);
  counter.add("channel", Dimension{"Ali"}, {Period::day}, 1, 1, at);

  std::map<std::string, Usage> seen;
  int pages = 0;
  std::string cursor = "0";
  do {
    const auto page = counter.dimensions("channel+dept", Period::day, at, cursor, 50);
    CHECK(page.window.id == day_id(at));
    CHECK(page.dimensions.size() <= 200); // COUNT is a hint, but not ignored for a big hash
    for (const auto& item : page.dimensions) {
      const auto [it, fresh] = seen.emplace(item.dimension.field(), item.usage);
      if (!fresh) {
        CHECK(it->second == item.usage); // HSCAN may repeat one; it must agree
      }
    }
    cursor = page.cursor;
    ++pages;
  } while (cursor != "0");

  CHECK(pages > 5); // it really paged
  REQUIRE(seen.size() == 1000);
  for (int i = 0; i < 1000; ++i) {
    const auto it = seen.find("Ali+bank-" + std::to_string(i));
    REQUIRE(it != seen.end());
    CHECK(it->second == Usage{i + 1, 100 * i});
  }
  // and the dimension's parts come back as they went in
  const auto first = counter.dimensions("channel", Period::day, at);
  CHECK(first.done());
  REQUIRE(first.dimensions.size() == 1);
  CHECK(first.dimensions[0].dimension == Dimension{"Ali"});
}

TEST_CASE_METHOD(ListingFixture,
                 "dimensions of an empty window is one empty page; bad input is refused",
                 "[listing][redis]") {
  const auto page = counter.dimensions("nothing", Period::month, at);
  CHECK(page.done());
  CHECK(page.dimensions.empty());
  CHECK(page.window.id.size() == 6);

  CHECK_THROWS_MATCHES(counter.dimensions("channel", Period::day, at, "12x"), Error,
                       Catch::Predicate<Error>([](const Error& e) {
                         return e.code() == errc::invalid_argument &&
                                std::string(e.what()).find("\"12x\"") != std::string::npos;
                       }));
  CHECK_THROWS_WITH(counter.dimensions("channel", Period::day, at, "0", 0),
                    Catch::Contains("page count 0"));
  CHECK_THROWS_WITH(counter.dimensions("chan:nel", Period::day, at), Catch::Contains("chan:nel"));
  CHECK_THROWS_WITH(counter.cap_usage("sms", "a b", at), Catch::Contains("a b"));
}

TEST_CASE_METHOD(ListingFixture, "cap_usage reads a cap's usage after takes and takes nothing",
                 "[listing][caps][redis]") {
  CHECK(counter.cap_usage("sms", "acct-1", at).used == 0);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(counter.take_daily_cap("sms", "acct-1", 5, at).allowed());
  }
  counter.take_daily_cap("sms", "acct-2", 5, at);
  for (int i = 0; i < 5; ++i) {
    const auto read = counter.cap_usage("sms", "acct-1", at);
    CHECK(read.used == 3);
    CHECK(read.window.id == day_id(at));
  }
  // Reading took nothing: two more takes fit under the cap of 5, the third does not.
  CHECK(counter.take_daily_cap("sms", "acct-1", 5, at).used == 4);
  CHECK(counter.take_daily_cap("sms", "acct-1", 5, at).used == 5);
  CHECK_FALSE(counter.take_daily_cap("sms", "acct-1", 5, at).allowed());
  CHECK(counter.cap_usage("sms", "acct-1", at).used == 5);
  CHECK(counter.cap_usage("sms", "acct-1", at + 24h).used == 0); // the next day
  CHECK(counter.cap_usage("sms", "acct-2", at).used == 1);
}
