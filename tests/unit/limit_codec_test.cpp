#include <catch2/catch.hpp>

#include <limitcounter/error.hpp>

#include "limit_counter/limit_codec.hpp"

using namespace std::chrono_literals;
using limitcounter::Calendar;
using limitcounter::CounterKeys;
using limitcounter::Decision;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::Metric;
using limitcounter::Period;
using limitcounter::Reply;
using limitcounter::Rule;
using limitcounter::Transaction;
using namespace limitcounter::detail;

namespace {

Reply str(const char* text) { return Reply::string(text); }

} // namespace

TEST_CASE("a decide call names every counter once and every rule", "[limit-codec]") {
  const Calendar calendar("Asia/Shanghai");
  const CounterKeys keys("p:");
  const Rule day_count = Rule("bank-day").where("dept").per(Period::day).max_count(10);
  const Rule day_amount =
      Rule("bank-day-amount").where("dept", "cmb").per(Period::day).max_amount(500);
  const Rule month = Rule("merchant-month").where("merchant").per(Period::month).max_amount(900);

  Transaction tx;
  tx.id = "t1";
  tx.attributes = {{"dept", "cmb"}, {"merchant", "m1"}};
  tx.amount = 42;
  tx.time = limitcounter::TimePoint{1636648200s}; // 2021-11-11T16:30:00Z: Nov 12 in Shanghai

  DecideContext context;
  context.calendar = &calendar;
  context.keys = &keys;
  context.window_grace = 1h;
  context.record_min_ttl = 24h;
  context.reservation_timeout = 15min;
  context.now = tx.time;
  const auto call = build_decide("consume", tx, {}, {&day_count, &day_amount, &month}, context);

  CHECK(call.keys == std::vector<std::string>{"p:tx:{t1}", "p:{dept}:holds", "p:{merchant}:holds",
                                              "p:{dept}:day:20211112",
                                              "p:{merchant}:month:202111"});
  // 8 fixed, the description, then 2 per counter, the rule count and 3 per rule
  REQUIRE(call.args.size() == 8 + 1 + 2 * 2 + 1 + 3 * 3);
  CHECK(call.args[0] == "consume");
  CHECK(call.args[1] == "consume|42|dept=cmb|merchant=m1");
  CHECK(call.args[2] == "42");
  CHECK(call.args[6] == "2"); // hold sets
  CHECK(call.args[7] == "2"); // counters: both dept rules share one
  const std::string day_expiry = call.args[10];
  const std::string month_expiry = call.args[12];
  CHECK(std::vector<std::string>(call.args.begin() + 9, call.args.end()) ==
        std::vector<std::string>{"cmb", day_expiry, "m1", month_expiry, "3", "1", "10", "-1", "1",
                                 "-1", "500", "2", "-1", "900"});
  // the description: per counter field, period, window id, window end, key expiry; the rules
  const std::string day_end = std::to_string(std::stoll(day_expiry) - 3600 * 1000);
  const std::string month_end = std::to_string(std::stoll(month_expiry) - 3600 * 1000);
  CHECK(call.args[8] == "cmb\nday\n20211112\n" + day_end + "\n" + day_expiry +
                            "\nm1\nmonth\n202111\n" + month_end + "\n" + month_expiry +
                            "\n3\nbank-day\n1\n10\n-1\nbank-day-amount\n1\n-1\n500\n"
                            "merchant-month\n2\n-1\n900");
  // the record outlives the month window by the grace
  CHECK(call.args[4] == month_expiry);
}

TEST_CASE("decide replies decode into decisions", "[limit-codec]") {
  // ARGV of a call with one counter and one rule, as build_decide makes it
  const std::string description =
      "cmb\nday\n20211112\n1636732800000\n1636736400000\n1\nbank-day\n1\n10\n-1";
  const std::vector<std::string> args{
      "consume",       "fp", "42", "0",  "0", "0", "1", "1", description, "cmb",
      "1636736400000", "1",  "1",  "10", "-1"};
  const Reply denied = Reply::array({str("denied"), Reply::integer(1), str("count"),
                                     Reply::integer(1), Reply::integer(10), Reply::integer(420)});
  const Decision decision = decode_decision(denied, args, "t1", 42);
  CHECK(decision.verdict == Decision::Verdict::denied);
  REQUIRE(decision.denial);
  CHECK(decision.denial->rule == "bank-day");
  CHECK(decision.denial->metric == Metric::count);
  CHECK(decision.denial->limit == 10);
  CHECK(decision.denial->used == 10);
  CHECK(decision.denial->requested == 1);
  REQUIRE(decision.rules.size() == 1);
  CHECK(decision.rules[0].window_id == "20211112");
  CHECK(decision.rules[0].period == Period::day);
  CHECK(decision.rules[0].remaining_count() == 0);
  CHECK_FALSE(decision.rules[0].remaining_amount());
  CHECK_FALSE(decision.replayed);

  // a replay brings the first call's arguments: today's args do not matter
  const Reply replay = Reply::array({str("replay"), str("consumed"), Reply::string(description),
                                     str("allowed"), Reply::integer(0), str(""), Reply::integer(1),
                                     Reply::integer(3), Reply::integer(126)});
  const Decision replayed = decode_decision(replay, {}, "t1", 42);
  CHECK(replayed.allowed());
  CHECK(replayed.replayed);
  CHECK(replayed.state == "consumed");
  CHECK(replayed.rules.at(0).rule == "bank-day");
  CHECK(replayed.rules.at(0).remaining_count() == 7);
  CHECK_FALSE(replayed.denial);

  CHECK(decode_decision(Reply::array({str("cancelled")}), args, "t1", 42).verdict ==
        Decision::Verdict::cancelled);
  CHECK_THROWS_MATCHES(
      decode_decision(Reply::array({str("conflict")}), args, "t1", 42), Error,
      Catch::Predicate<Error>([](const Error& e) { return e.code() == errc::conflict; }));
  CHECK_THROWS_AS(decode_decision(Reply::array({str("denied"), Reply::integer(1)}), args, "t1", 42),
                  Error);
  CHECK_THROWS_AS(decode_decision(denied, {"consume"}, "t1", 42), Error); // arguments too short

  // an overflow names its counter; the message names its field and period
  CHECK_THROWS_MATCHES(
      decode_decision(Reply::array({str("overflow"), Reply::integer(1)}), args, "t1", 42), Error,
      Catch::Predicate<Error>([](const Error& e) {
        return e.code() == errc::precision_overflow &&
               std::string(e.what()).find("day total of cmb") != std::string::npos;
      }));
  CHECK_THROWS_AS(
      decode_decision(Reply::array({str("overflow"), Reply::integer(2)}), args, "t1", 42), Error);
}
