// limitctl's pure parts (tools/limitctl/args.hpp, output.hpp): TIME, DIMENSION and period
// arguments, exit codes, the rule diff and the JSON text.
#include <catch2/catch.hpp>

#include <sstream>

#include "args.hpp"
#include "output.hpp"

using limitcounter::Period;
using limitcounter::Rule;
using limitcounter::RuleSet;
using limitcounter::TimePoint;
using limitctl::Failure;

namespace {

std::int64_t unix_ms(TimePoint at) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch()).count();
}

limitctl::ExitCode usage_failure(const std::function<void()>& call, const std::string& named) {
  try {
    call();
  } catch (const Failure& failure) {
    CHECK_THAT(failure.what(), Catch::Contains(named));
    return failure.code();
  }
  FAIL("accepted: " + named);
  return limitctl::exit_ok;
}

} // namespace

TEST_CASE("TIME: ISO 8601 with an offset, Z, or local in the zone", "[limitctl][unit]") {
  using limitctl::parse_time;
  // 2026-11-23T07:04:05Z = 1795417445 s.
  CHECK(unix_ms(parse_time("2026-11-23T07:04:05Z", "UTC")) == 1795417445000);
  CHECK(unix_ms(parse_time("2026-11-23T15:04:05+08:00", "UTC")) == 1795417445000);
  CHECK(unix_ms(parse_time("2026-11-23T02:04:05-0500", "Asia/Shanghai")) == 1795417445000);
  CHECK(unix_ms(parse_time("2026-11-23T07:04:05.25Z", "UTC")) == 1795417445250);
  CHECK(unix_ms(parse_time("2026-11-23 07:04Z", "UTC")) == 1795417440000);
  // Without an offset: local time in the zone given (Shanghai is UTC+8, no DST).
  CHECK(unix_ms(parse_time("2026-11-23T15:04:05", "Asia/Shanghai")) == 1795417445000);
  // Midnight in Shanghai is 16:00 UTC the day before.
  CHECK(unix_ms(parse_time("2026-11-24", "Asia/Shanghai")) == 1795449600000);
  // A local time skipped by a spring-forward is an instant all the same (not an error).
  CHECK_NOTHROW(parse_time("2026-03-29T02:30", "Europe/Berlin"));

  for (const char* bad : {"yesterday", "2026-13-01", "2026-02-30", "2026-11-23T25:00Z",
                          "2026-11-23T07:04:05Zoo", "2026-11-23T07", "2026-11-23T07:04:05.Z"}) {
    CHECK(usage_failure([&] { parse_time(bad, "UTC"); }, bad) == limitctl::exit_usage);
  }
  CHECK(usage_failure([] { parse_time("2026-11-23", "Mars/Olympus"); }, "Mars/Olympus") ==
        limitctl::exit_usage);
}

TEST_CASE("DIMENSION and PERIOD arguments", "[limitctl][unit]") {
  CHECK(limitctl::parse_dimension("Ali+Deduct+cmb").parts() ==
        std::vector<std::string>{"Ali", "Deduct", "cmb"});
  CHECK(limitctl::parse_dimension("m1").field() == "m1");
  for (const char* bad : {"Ali++cmb", "", "+x", "a b", "a{b}"}) {
    CHECK(usage_failure([&] { limitctl::parse_dimension(bad); }, "dimension") ==
          limitctl::exit_usage);
  }
  CHECK(limitctl::periods_to_show("") == std::vector<Period>{Period::minute, Period::hour,
                                                             Period::day, Period::week,
                                                             Period::month, Period::year});
  CHECK(limitctl::periods_to_show("hour") == std::vector<Period>{Period::hour});
  CHECK(usage_failure([] { limitctl::periods_to_show("fortnight"); }, "fortnight") ==
        limitctl::exit_usage);
}

TEST_CASE("exit codes of library errors", "[limitctl][unit]") {
  using limitcounter::errc;
  using limitcounter::Error;
  CHECK(limitctl::exit_code_of(Error(errc::not_found, "x")) == limitctl::exit_not_found);
  CHECK(limitctl::exit_code_of(Error(errc::conflict, "x")) == limitctl::exit_conflict);
  CHECK(limitctl::exit_code_of(Error(errc::invalid_argument, "x")) == limitctl::exit_usage);
  CHECK(limitctl::exit_code_of(Error(errc::window_closed, "x")) == limitctl::exit_usage);
  CHECK(limitctl::exit_code_of(Error(errc::connect_failed, "x")) == limitctl::exit_redis);
  CHECK(limitctl::exit_code_of(Error(errc::server_error, "x")) == limitctl::exit_redis);
}

TEST_CASE("rule diff: added, removed, changed by name", "[limitctl][unit]") {
  RuleSet before;
  before.add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(1000));
  before.add(Rule("dept-month").where("dept").per(Period::month).max_count(100));
  before.add(Rule("single").where("merchant").per_transaction().max_amount(500));
  RuleSet after;
  after.add(Rule("single").where("merchant").per_transaction().max_amount(500));
  after.add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(2000));
  after.add(Rule("cmb-day").where("dept", "cmb").per(Period::day).max_count(5));

  const auto diff = limitctl::diff_rules(before, after);
  CHECK(diff.added == std::vector<std::string>{"cmb-day"});
  CHECK(diff.removed == std::vector<std::string>{"dept-month"});
  CHECK(diff.changed == std::vector<std::string>{"merchant-day"});
  CHECK(diff.unchanged == 1);
  CHECK_FALSE(diff.attributes_changed);
  CHECK(limitctl::diff_rules(after, after).empty());

  // Every attribute of a rule counts: a policy, a condition's value, blocking.
  const Rule base = Rule("r").where("dept", "cmb").per(Period::day).max_count(5);
  CHECK(limitctl::same_rule(base, Rule(base)));
  CHECK_FALSE(
      limitctl::same_rule(base, Rule(base).on_redis_failure(limitcounter::FailurePolicy::deny)));
  CHECK_FALSE(
      limitctl::same_rule(base, Rule("r").where("dept", "cib").per(Period::day).max_count(5)));
  CHECK_FALSE(limitctl::same_rule(base, Rule(base).blocking()));
  CHECK_FALSE(
      limitctl::same_rule(base, Rule("r").where("dept", "cmb").per(Period::week).max_count(5)));

  const auto other_attributes = limitctl::diff_rules(before, RuleSet({"merchant", "dept", "mcc"}));
  CHECK(other_attributes.attributes_changed);
  CHECK(other_attributes.removed.size() == 3);
}

TEST_CASE("output: JSON text and the text form", "[limitctl][unit]") {
  using limitctl::Json;
  Json value = Json::object()
                   .set("name", "a \"quoted\"\nline\x01")
                   .set("count", std::int64_t{-3})
                   .set("ok", true)
                   .set("none", Json())
                   .set("rows", Json::array()
                                    .push(Json::object().set("k", "x").set("n", 1))
                                    .push(Json::object().set("k", "long-key").set("n", 22)));
  CHECK(value.dump() ==
        "{\"name\":\"a \\\"quoted\\\"\\nline\\u0001\",\"count\":-3,\"ok\":true,"
        "\"none\":null,\"rows\":[{\"k\":\"x\",\"n\":1},{\"k\":\"long-key\",\"n\":22}]}");
  std::ostringstream text;
  Json::object()
      .set("rows", Json::array()
                       .push(Json::object().set("k", "x").set("n", 1))
                       .push(Json::object().set("k", "long-key").set("n", 22)))
      .print_text(text);
  CHECK(text.str() == "rows:\n  k         n\n  x         1\n  long-key  22\n");
}

TEST_CASE("output: text from Redis shows control and invisible characters escaped",
          "[limitctl][unit]") {
  using limitctl::Json;
  // ESC [2J clears the screen, U+009B is the one-character CSI, U+202E reverses what follows.
  const std::string hostile = "bob\x1b[2J\xc2\x9b"
                              "1m\xe2\x80\xaemoc.\x9b \xe5\xbc\xa0";
  CHECK(limitctl::shown(hostile) == "bob\\x1b[2J\\u009b1m\\u202emoc.\\x9b \xe5\xbc\xa0");
  std::ostringstream text;
  Json::object()
      .set("nickname", hostile)
      .set("rows", Json::array().push(Json::object().set("reason", "a\tb")))
      .set("yaml", "rules:\n  - name: x\x85\n")
      .print_text(text);
  CHECK(text.str() == "nickname: bob\\x1b[2J\\u009b1m\\u202emoc.\\x9b \xe5\xbc\xa0\n"
                      "rows:\n  reason\n  a\\x09b\n"
                      "yaml:\n  rules:\n    - name: x\\x85\n");
  CHECK(Json(hostile).dump() == "\"bob\\u001b[2J\\u009b1m\\u202emoc.\\ufffd \xe5\xbc\xa0\"");
}
