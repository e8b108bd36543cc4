#include <catch2/catch.hpp>

#include <functional>

#include <limitcounter/limitcounter.hpp>

#include "support/redis_server.hpp"

using namespace std::chrono_literals;
using namespace limitcounter;
using limitcounter::testing::RedisServer;

namespace {

// Every key and its serialized value: equal snapshots mean Redis holds exactly the same.
std::vector<std::string> snapshot(Redis& redis) {
  std::vector<std::string> out;
  const Reply keys = redis.command({"KEYS", "*"});
  for (const Reply& key : keys.as_array()) {
    out.push_back(key.as_string() + "=" + redis.command({"DUMP", key.as_string()}).debug_string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct Case {
  std::string what;
  std::function<void()> call;
  errc code;
  std::string needle; ///< the message must name this (the bad value)
};

} // namespace

TEST_CASE("hostile input to every public function: a clear error, Redis untouched",
          "[redis][bad-input][standalone]") {
  RedisServer server;
  Redis redis(server.options());
  LimitCounter limits(redis, Calendar("Asia/Shanghai"));
  limits.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_amount(1000)));
  Wallet wallet(redis);
  RedPacketPool pool(redis);

  // a little state for the state-transition cases
  REQUIRE(limits.consume({"paid", {{"merchant", "m1"}}, 10}).allowed());
  REQUIRE(limits.reserve({"held", {{"merchant", "m1"}}, 10}).allowed());
  REQUIRE(wallet.load("w1", {100, 1, 0}));
  pool.create("pk", {1, 2});

  const std::int64_t two_53 = std::int64_t{1} << 53;
  const std::string huge(100000, 'x');
  const std::string not_utf8 = "m\xff\xfe";
  const auto tx = [](std::string id, std::string merchant, std::int64_t amount) {
    return Transaction{std::move(id), {{"merchant", std::move(merchant)}}, amount};
  };
  const std::vector<Case> cases{
      {"empty dimension part",
       [&] {
         limits.add("c", Dimension{"a", ""}, {Period::day}, 1, 1);
       },
       errc::invalid_argument, "is empty"},
      {"huge dimension part", [&] { limits.add("c", Dimension{huge}, {Period::day}, 1, 1); },
       errc::invalid_argument, "100000 bytes"},
      {"non-UTF-8 part", [&] { limits.add("c", Dimension{not_utf8}, {Period::day}, 1, 1); },
       errc::invalid_argument, "\\xff\\xfe"},
      {"separator in part", [&] { limits.add("c", Dimension{"a+b"}, {Period::day}, 1, 1); },
       errc::invalid_argument, "a+b"},
      {"brace in counter name", [&] { limits.add("c{x}", Dimension{"a"}, {Period::day}, 1, 1); },
       errc::invalid_argument, "c{x}"},
      {"control char", [&] { limits.add("c", Dimension{"a\nb"}, {Period::day}, 1, 1); },
       errc::invalid_argument, "a\\x0ab"},
      {"negative count", [&] { limits.add("c", Dimension{"a"}, {Period::day}, -1, 1); },
       errc::invalid_argument, "-1"},
      {"INT64_MAX amount", [&] { limits.add("c", Dimension{"a"}, {Period::day}, 1, INT64_MAX); },
       errc::precision_overflow, std::to_string(INT64_MAX)},
      {"2^53 amount", [&] { limits.add("c", Dimension{"a"}, {Period::day}, 1, two_53); },
       errc::precision_overflow, std::to_string(two_53)},
      {"consume: negative amount", [&] { limits.consume(tx("t1", "m1", -5)); },
       errc::invalid_argument, "-5"},
      {"consume: 2^53 amount", [&] { limits.consume(tx("t1", "m1", two_53)); },
       errc::precision_overflow, std::to_string(two_53)},
      {"consume: empty id", [&] { limits.consume(tx("", "m1", 5)); }, errc::invalid_argument,
       "transaction id"},
      {"consume: brace in id", [&] { limits.consume(tx("a}b", "m1", 5)); }, errc::invalid_argument,
       "a}b"},
      {"consume: wildcard value", [&] { limits.consume(tx("t1", "*", 5)); }, errc::invalid_argument,
       "wildcard"},
      {"consume: missing attribute",
       [&] {
         limits.consume({"t1", {}, 5});
       },
       errc::invalid_argument, "merchant"},
      {"consume: same id, other amount", [&] { limits.consume(tx("paid", "m1", 11)); },
       errc::conflict, "paid"},
      {"refund: unknown id", [&] { limits.refund("nope"); }, errc::not_found, "nope"},
      {"refund: more than consumed", [&] { limits.refund("paid", 11, "r1"); },
       errc::invalid_argument, "11"},
      {"refund: zero", [&] { limits.refund("paid", 0, "r1"); }, errc::invalid_argument, "0"},
      {"refund: a reservation", [&] { limits.refund("held"); }, errc::conflict, "held"},
      {"confirm: unknown id", [&] { limits.confirm("nope"); }, errc::not_found, "nope"},
      {"confirm: more than held", [&] { limits.confirm("held", 11); }, errc::invalid_argument,
       "11"},
      {"confirm: a consume", [&] { limits.confirm("paid"); }, errc::conflict, "paid"},
      {"cancel: a consume", [&] { limits.cancel("paid"); }, errc::conflict, "paid"},
      {"cap: negative max", [&] { limits.take_daily_cap("sms", "a", -1); }, errc::invalid_argument,
       "-1"},
      {"cap: space in subject", [&] { limits.take_daily_cap("sms", "a b", 5); },
       errc::invalid_argument, "a b"},
      {"sliding: zero window", [&] { limits.hit_sliding_window("s", "a", 5, 0ms); },
       errc::invalid_argument, "0 ms"},
      {"wallet: zero amount", [&] { wallet.deduct("w1", "o1", 0); }, errc::invalid_argument, "0"},
      {"wallet: 2^53", [&] { wallet.credit("w1", "o1", two_53); }, errc::precision_overflow,
       std::to_string(two_53)},
      {"wallet: bad user", [&] { wallet.deduct("w:1", "o1", 5); }, errc::invalid_argument, "w:1"},
      {"wallet: huge order id", [&] { wallet.deduct("w1", huge, 5); }, errc::invalid_argument,
       "100000 bytes"},
      {"wallet: stale-version overflow",
       [&] {
         wallet.load("w1", {two_53, 9, 0});
       },
       errc::precision_overflow, std::to_string(two_53)},
      {"red packet: zero amount",
       [&] {
         pool.create("p2", {1, 0});
       },
       errc::invalid_argument, "0"},
      {"red packet: existing id", [&] { pool.create("pk", {1}); }, errc::conflict, "pk"},
      {"red packet: unknown id", [&] { pool.grab("nope", "u1"); }, errc::not_found, "nope"},
      {"red packet: bad user", [&] { pool.grab("pk", "u{1}"); }, errc::invalid_argument, "u{1}"},
      {"usage: bad counter name", [&] { limits.usage("c:d", Dimension{"a"}, Period::day); },
       errc::invalid_argument, "c:d"},
      {"check: huge id", [&] { limits.check(tx(huge, "m1", 5)); }, errc::invalid_argument,
       "100000 bytes"},
      {"add_many: one bad request refuses the batch",
       [&] {
         limits.add_many({{"c", Dimension{"a"}, {Period::day}, 1, 1, Clock::now()},
                          {"c", Dimension{"a"}, {Period::day}, -3, 1, Clock::now()}});
       },
       errc::invalid_argument, "-3"},
      {"consume_many: one bad transaction refuses the batch",
       [&] {
         limits.consume_many({tx("b1", "m1", 5), tx("b2", "m 1", 5)});
       },
       errc::invalid_argument, "m 1"},
      {"reserve: negative", [&] { limits.reserve(tx("t9", "m1", -1)); }, errc::invalid_argument,
       "-1"},
      {"cancel: empty id", [&] { limits.cancel(""); }, errc::invalid_argument, "transaction id"},
      {"rules: zero limit",
       [&] { RuleSet().add(Rule("z").where("merchant").per(Period::day).max_count(0)); },
       errc::invalid_argument, "max_count 0"},
      {"wallet: pending of a bad user", [&] { wallet.pending_orders("u{1}", 0ms); },
       errc::invalid_argument, "u{1}"},
      {"wallet: partition out of range", [&] { wallet.stale_pending(9999, 0ms); },
       errc::invalid_argument, "9999"},
      {"journal: bad consumer name",
       [&] {
         JournalConsumer(redis, WalletOptions{}, {"g", "a b", 10, 1s});
       },
       errc::invalid_argument, "a b"},
      {"payouts: partition out of range", [&] { pool.take_payouts(4096, 1); },
       errc::invalid_argument, "4096"},
      {"payouts: dead letters of a bad partition", [&] { pool.dead_payouts(4096); },
       errc::invalid_argument, "4096"},
      {"red packet: close unknown", [&] { pool.close("nope"); }, errc::not_found, "nope"},
      {"red packet: huge id", [&] { pool.create(huge, {1}); }, errc::invalid_argument,
       "100000 bytes"},
      {"red packet: too many amounts",
       [&] { pool.create("p3", std::vector<std::int64_t>(1'000'001, 1)); }, errc::invalid_argument,
       "1000001 amounts"},
      {"red packet: past expiry",
       [&] {
         limitcounter::PacketOptions past;
         past.expires_at = limitcounter::Clock::now() - 1s;
         pool.create("p4", {1, 2}, past);
       },
       errc::invalid_argument, "p4 would expire in the past"},
      {"split: impossible", [&] { split(1, 3); }, errc::invalid_argument, "total 1"},
      {"calendar: unknown zone", [&] { Calendar("Nowhere/City"); }, errc::unknown_time_zone,
       "Nowhere/City"},
      {"uri: bad port", [&] { Redis("redis://127.0.0.1:99999"); }, errc::invalid_argument, "99999"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    const auto before = snapshot(redis);
    try {
      c.call();
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.code() == c.code);
      CHECK_THAT(e.what(), Catch::Contains(c.needle));
    }
    CHECK(snapshot(redis) == before);
  }
}
