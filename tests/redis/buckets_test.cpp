// Counters spread over buckets (LimitCounterOptions::counter_buckets): every operation works,
// and the keys are where docs/ARCHITECTURE.md says, read back with plain Redis commands.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include <limitcounter/limit_counter.hpp>

#include "support/outcome.hpp"
#include "support/probe.hpp"
#include "support/redis_server.hpp"
#include "support/topology.hpp"

using namespace std::chrono_literals;
using namespace limitcounter;
using limitcounter::testing::error_of;
using limitcounter::testing::keys_matching;
using limitcounter::testing::outcome;
using limitcounter::testing::test_options;
using limitcounter::testing::unique_prefix;

namespace {

constexpr std::uint32_t buckets = 64;

struct BucketFixture {
  Redis redis{test_options()};
  std::string prefix = unique_prefix() + "bk:";
  Calendar calendar{"UTC"};
  LimitCounter limits{redis, calendar, [this] {
                        LimitCounterOptions options;
                        options.key_prefix = prefix;
                        options.counter_buckets = buckets;
                        return options;
                      }()};

  BucketFixture() {
    limits.set_rules(
        RuleSet()
            .add(Rule("dept-day").where("dept").per(Period::day).max_amount(1000))
            .add(Rule("pair-day").where("channel").where("dept").per(Period::day).max_count(100)));
  }
  static Transaction tx(const std::string& id, std::int64_t amount, const std::string& dept) {
    return Transaction{id, {{"channel", "Ali"}, {"dept", dept}}, amount};
  }
  // The day hash of `dimension` of `counter`, built by hand as docs/ARCHITECTURE.md says:
  // bucket = CRC16(dimension) % 16384 % buckets, tag `<bucket>:<counter>`.
  std::string day_key(const std::string& counter, const std::string& dimension) const {
    return prefix + "{" + std::to_string(crc16(dimension) % 16384 % buckets) + ":" + counter +
           "}:day:" + calendar.window(Period::day, Clock::now()).id;
  }
  std::string hget(const std::string& key, const std::string& field) {
    const Reply reply = redis.command({"HGET", key, field});
    return reply.is_nil() ? "" : reply.as_string();
  }
};

} // namespace

TEST_CASE("the bucket of a dimension is CRC16 mod 16384 mod N, as CLUSTER KEYSLOT computes",
          "[buckets][redis]") {
  if (!limitcounter::testing::on_cluster()) {
    SUCCEED("CLUSTER KEYSLOT needs a cluster");
    return;
  }
  Redis redis{test_options()};
  const CounterKeys keys("p:", 1000);
  for (const std::string dimension : {"Ali+Deduct+cmb", "cmb", "m-17", "\xe6\x8b\x9b"}) {
    const Reply slot = redis.command({"CLUSTER", "KEYSLOT", dimension});
    CHECK(keys.bucket_of(dimension) == slot.to_int64() % 1000);
  }
}

TEST_CASE_METHOD(BucketFixture,
                 "with 64 buckets, consume, reserve, confirm, cancel and refund "
                 "move the counters of each dimension's bucket",
                 "[buckets][redis]") {
  REQUIRE(limits.consume(tx("c1", 300, "cmb")).allowed());
  REQUIRE(limits.consume(tx("c2", 200, "icbc")).allowed());
  REQUIRE(limits.reserve(tx("r1", 100, "cmb")).allowed());
  REQUIRE(limits.reserve(tx("r2", 50, "cmb")).allowed());
  CHECK(limits.confirm("r1", 80).amount == 80);
  CHECK(outcome(limits.cancel("r2")) == std::pair(CancelResult::Status::cancelled, false));
  CHECK(limits.refund("c1", 100, "back").refunded_now == 100);
  // a retry replays (the same id decides once)
  CHECK(limits.consume(tx("c1", 300, "cmb")).replayed);
  CHECK(limits.refund("c1", 100, "back").replayed);

  const Usage cmb{2, 280}; // c1 (300 - 100) and r1 confirmed at 80
  CHECK(limits.usage("dept", Dimension{"cmb"}, Period::day) == cmb);
  CHECK(limits.usage("dept", Dimension{"icbc"}, Period::day) == Usage{1, 200});
  CHECK(limits.usage("channel+dept", Dimension{"Ali", "cmb"}, Period::day) == cmb);
  // where the docs say, read with HGET: "<count>:<amount>"
  CHECK(hget(day_key("dept", "cmb"), "cmb") == "2:280");
  CHECK(hget(day_key("dept", "icbc"), "icbc") == "1:200");
  CHECK(hget(day_key("channel+dept", "Ali+cmb"), "Ali+cmb") == "2:280");
  // and nowhere else: no hash of the unbucketed layout
  CHECK(keys_matching(prefix + "{dept}*").empty());
  CHECK(keys_matching(prefix + "{channel+dept}*").empty());

  // a denial gives back what it took, in its bucket
  const Decision denied = limits.consume(tx("big", 900, "cmb"));
  REQUIRE_FALSE(denied.allowed());
  REQUIRE(denied.denial);
  CHECK(denied.denial->rule == "dept-day");
  CHECK(hget(day_key("dept", "cmb"), "cmb") == "2:280");
  CHECK(hget(day_key("channel+dept", "Ali+cmb"), "Ali+cmb") == "2:280");

  // the record reads back, also without naming the counters
  const auto record = limits.transaction_record("r1");
  REQUIRE(record);
  CHECK(record->state == TransactionState::confirmed);
  CHECK(record->amount == 80);
  CHECK(error_of([&] { limits.cancel("c2"); }).code() == errc::conflict);
}

TEST_CASE_METHOD(BucketFixture, "with 64 buckets, a one-rule transaction is found by its id alone",
                 "[buckets][redis]") {
  limits.set_rules(RuleSet().add(Rule("dept-day").where("dept").per(Period::day).max_amount(1000)));
  REQUIRE(limits.reserve(tx("one-r", 400, "cmb")).allowed());
  CHECK(limits.confirm("one-r", 300).amount == 300);
  REQUIRE(limits.consume(tx("one-c", 200, "cmb")).allowed());
  CHECK(limits.refund("one-c").refunded_now == 200);
  REQUIRE(limits.reserve(tx("one-x", 100, "cmb")).allowed());
  CHECK(outcome(limits.cancel("one-x")) == std::pair(CancelResult::Status::cancelled, false));
  CHECK(hget(day_key("dept", "cmb"), "cmb") == "1:300");
  if (limitcounter::testing::on_cluster()) {
    CHECK(redis.command({"EXISTS", prefix + "tx:{one-r}"}).to_int64() == 1);
  }
}

TEST_CASE_METHOD(BucketFixture,
                 "with 64 buckets, dimensions lists every bucket and adjust "
                 "writes the audit of the dimension's bucket",
                 "[buckets][redis]") {
  std::vector<AddRequest> adds;
  for (int i = 0; i < 500; ++i) {
    adds.push_back({"dept", Dimension{"d" + std::to_string(i)}, {Period::day}, 1, i, Clock::now()});
  }
  limits.add_many(adds);
  std::set<std::uint32_t> used_buckets;
  for (const auto& add : adds) {
    used_buckets.insert(limits.keys().bucket_of(add.dimension.field()));
  }
  CHECK(used_buckets.size() == buckets); // 500 dimensions fill all 64 buckets

  std::map<std::string, Usage> seen;
  std::string cursor = "0";
  int pages = 0;
  do {
    const auto page = limits.dimensions("dept", Period::day, Clock::now(), cursor, 40);
    for (const auto& item : page.dimensions) {
      seen[item.dimension.field()] = item.usage;
    }
    cursor = page.cursor;
    if (!page.done()) {
      CHECK(page.dimensions.size() >= 40); // a page is filled from the next buckets
      CHECK_THAT(cursor, Catch::Contains(":"));
    }
    ++pages;
  } while (cursor != "0");
  CHECK(pages > 5);
  REQUIRE(seen.size() == 500);
  CHECK(seen["d17"] == Usage{1, 17});
  // a cursor of another bucket count (or out of range) is refused, naming it
  const Error bad = error_of([&] { limits.dimensions("dept", Period::day, Clock::now(), "64:0"); });
  CHECK(bad.code() == errc::invalid_argument);
  CHECK_THAT(bad.what(), Catch::Contains("\"64:0\""));
  CHECK(error_of([&] { limits.dimensions("dept", Period::day, Clock::now(), "12"); }).code() ==
        errc::invalid_argument);

  CounterCorrection correction;
  correction.id = "fix-1";
  correction.count = 2;
  correction.amount = 5;
  correction.author = "ops";
  correction.reason = "test";
  const auto fixed = limits.adjust("dept", Dimension{"d17"}, Period::day, correction);
  CHECK(fixed.after == Usage{3, 22});
  CHECK(limits.adjust("dept", Dimension{"d17"}, Period::day, correction).replayed);
  CHECK(hget(day_key("dept", "d17"), "d17") == "3:22");
  const std::string audit =
      prefix + "{" + std::to_string(crc16("d17") % 16384 % buckets) + ":dept}:audit";
  CHECK(redis.command({"XLEN", audit}).to_int64() == 1);
}

TEST_CASE("a bucket count outside 1..16384 is refused, naming it", "[buckets][redis]") {
  LimitCounterOptions options;
  options.counter_buckets = 0;
  const Error zero =
      error_of([&] { LimitCounter(Redis(test_options()), Calendar("UTC"), options); });
  CHECK(zero.code() == errc::invalid_argument);
  CHECK_THAT(zero.what(), Catch::Contains("counter_buckets 0"));
  options.counter_buckets = 16385;
  CHECK_THAT(
      error_of([&] { LimitCounter(Redis(test_options()), Calendar("UTC"), options); }).what(),
      Catch::Contains("16385"));
}
