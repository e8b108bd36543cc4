#include <catch2/catch.hpp>

#include <limitcounter/error.hpp>

#include "limit_counter/codec/decide_arguments.hpp"
#include "limit_counter/codec/decide_batch.hpp"
#include "limit_counter/codec/decide_replies.hpp"
#include "limit_counter/codec/reversals.hpp"
#include "limit_counter/codec/rule_args.hpp"
#include "shared/amount.hpp"

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
using limitcounter::TransactionState;
using namespace limitcounter::detail;

namespace {

Reply str(const char* text) { return Reply::string(text); }

// Integer replies, as a decide reply's values.
std::vector<Reply> ints(std::initializer_list<std::int64_t> values) {
  std::vector<Reply> items;
  for (const std::int64_t value : values) {
    items.push_back(Reply::integer(value));
  }
  return items;
}

bool has_code(const Error& e, errc code) { return e.code() == code; }

// The strings of a MessagePack array of strings (what a batch call's transactions are).
std::vector<std::string> msgpack_strings(const std::string& bytes) {
  std::size_t at = 0;
  const auto byte = [&] { return static_cast<unsigned char>(bytes.at(at++)); };
  const auto big_endian = [&](int count) {
    std::size_t value = 0;
    for (int k = 0; k < count; ++k) {
      value = (value << 8) | byte();
    }
    return value;
  };
  const unsigned head = byte();
  std::size_t size = head & 0x0f;
  if (head == 0xdc) {
    size = big_endian(2);
  } else {
    REQUIRE((head & 0xf0) == 0x90);
  }
  std::vector<std::string> values;
  for (std::size_t i = 0; i < size; ++i) {
    const unsigned first = byte();
    std::size_t length = first & 0x1f;
    if (first == 0xd9 || first == 0xda) {
      length = big_endian(first == 0xd9 ? 1 : 2);
    } else {
      REQUIRE((first & 0xe0) == 0xa0);
    }
    values.push_back(bytes.substr(at, length));
    at += length;
  }
  CHECK(at == bytes.size());
  return values;
}

// The integers of a MessagePack array of fixints, int64s and decimal fixstrs (what a decide call's
// program is: its key expiries are text).
std::vector<std::int64_t> msgpack_ints(const std::string& bytes) {
  std::vector<std::int64_t> values;
  std::size_t at = 0;
  const auto byte = [&] { return static_cast<unsigned char>(bytes.at(at++)); };
  const unsigned head = byte();
  std::size_t size = head & 0x0f;
  if (head == 0xdc) {
    size = static_cast<std::size_t>(byte()) << 8;
    size |= byte();
  } else {
    REQUIRE((head & 0xf0) == 0x90);
  }
  for (std::size_t i = 0; i < size; ++i) {
    const unsigned first = byte();
    if (first <= 0x7f || first >= 0xe0) {
      values.push_back(static_cast<signed char>(first));
      continue;
    }
    if ((first & 0xe0) == 0xa0) {
      const std::size_t length = first & 0x1f;
      values.push_back(std::stoll(bytes.substr(at, length)));
      at += length;
      continue;
    }
    REQUIRE(first == 0xd3);
    std::uint64_t bits = 0;
    for (int k = 0; k < 8; ++k) {
      bits = (bits << 8) | byte();
    }
    values.push_back(static_cast<std::int64_t>(bits));
  }
  CHECK(at == bytes.size());
  return values;
}

struct Example {
  Calendar calendar{"Asia/Shanghai"};
  CounterKeys keys{"p:"};
  Rule day_count = Rule("bank-day").where("dept").per(Period::day).max_count(10);
  Rule day_amount = Rule("bank-day-amount").where("dept", "cmb").per(Period::day).max_amount(500);
  Rule month = Rule("merchant-month").where("merchant").per(Period::month).max_amount(900);
  Rule single = Rule("single").max_amount(1000);
  Transaction tx;
  DecideContext context;

  Example() {
    tx.id = "t1";
    tx.attributes = {{"dept", "cmb"}, {"merchant", "m1"}};
    tx.amount = 42;
    tx.time = limitcounter::TimePoint{1636648200s}; // 2021-11-11T16:30:00Z: Nov 12 in Shanghai
    context.calendar = &calendar;
    context.keys = &keys;
    context.window_grace = 1h;
    context.replay_horizon = 24h;
    context.reservation_timeout = 15min;
    context.now = tx.time;
  }

  LimitCall call(limitcounter::LimitOp op = limitcounter::LimitOp::consume) const {
    return build_decide(op, tx, {&single}, {&day_count, &day_amount, &month}, context);
  }
};

} // namespace

TEST_CASE("a decide call names every counter once and every rule", "[limit-codec]") {
  const Example example;
  const LimitCall call = example.call();
  // header: op, n, now, record lifetime, hold expiry, programs; a program, S, a counter set, the
  // transaction (no set number: there is one set)
  REQUIRE(call.args.size() == 6 + 2 + 1 + 3 + 3);
  CHECK(call.args[0] == "consume");
  CHECK(call.args[1] == "1");
  const auto now_ms = unix_millis(example.tx.time);
  CHECK(call.args[2] == std::to_string(now_ms));
  // the record lives the replay horizon, not until the month's end
  CHECK(std::stoll(call.args[3]) == 24 * 3600 * 1000);
  CHECK(std::stoll(call.args[4]) == now_ms + 15 * 60 * 1000);
  CHECK(call.args[5] == "1");
  // the program: 2 hold sets (one per counter), 2 counters (both dept rules share one), their keys'
  // expiries and field numbers, 4 rules of 3; the names
  const std::vector<std::int64_t> numbers = msgpack_ints(call.args[6]);
  REQUIRE(numbers.size() == 2 + 2 + 2 + 1 + 3 * 4);
  const std::int64_t day_expiry = numbers[2];
  const std::int64_t month_expiry = numbers[3];
  CHECK(month_expiry > now_ms + decide_record_lifetime(call.args)); // the month's key outlives it
  // the counters' keys and the number of each one's field: no dimension value, so that the
  // transactions under the same rules and windows share one counter set; it expires a replay
  // horizon and an hour after the first window's key (the day's: no decision writes a record
  // naming it after that window closed)
  const std::string text = "2 " + std::to_string(day_expiry + 25 * 3600 * 1000) +
                           "\np:{dept}:day:20211112 1\np:{merchant}:month:202111 2\n"
                           "p:{dept}:day:20211112:holds\np:{merchant}:month:202111:holds";
  CHECK(numbers == std::vector<std::int64_t>{2, 2, day_expiry, month_expiry, 1, 2, 4, 0, -1, 1000,
                                             1, 10, -1, 1, -1, 500, 2, -1, 900});
  CHECK(call.args[7] == "single bank-day bank-day-amount merchant-month");
  // one counter set of program 1: its name and text
  CHECK(call.args[8] == "1");
  CHECK(call.args[9] == "1");
  const std::string name = call.args[10];
  CHECK(name.size() == 8);
  CHECK(call.args[11] == text);
  // the transaction: fingerprint, amount, its distinct fields
  CHECK(call.args[12] == fingerprint(limitcounter::LimitOp::consume, example.tx));
  CHECK(decide_fingerprint(call.args) == call.args[12]);
  CHECK(call.args[13] == "42");
  CHECK(decide_amount(call.args) == "42");
  CHECK(decide_record_lifetime(call.args) == 24 * 3600 * 1000);
  CHECK(call.args[14] == "cmb:m1");
  // the record, the counter set, its counters, their hold sets (each counter's window's)
  CHECK(call.keys == std::vector<std::string>{"p:tx:{t1}", "p:cs:" + name, "p:{dept}:day:20211112",
                                              "p:{merchant}:month:202111",
                                              "p:{dept}:day:20211112:holds",
                                              "p:{merchant}:month:202111:holds"});
  // what the reply is read with stays in the client
  REQUIRE(call.shape.counters.size() == 2);
  CHECK(call.shape.counters[0].window_id == "20211112");
  CHECK(call.shape.counters[1].period == Period::month);
  CHECK(unix_millis(call.shape.counters[0].resets_at) == day_expiry - 3600 * 1000);
  REQUIRE(call.shape.rules.size() == 4);
  CHECK(call.shape.rules[0].counter == 0);
  CHECK(call.shape.rules[3].rule->name() == "merchant-month");
  CHECK(call.shape.rules[3].counter == 2);

  SECTION("a check records nothing, so it names no counter set") {
    const LimitCall check = example.call(limitcounter::LimitOp::check);
    CHECK(check.args[10].empty());
  }
}

TEST_CASE("a lone consume's call drops the arguments that say it is one", "[limit-codec]") {
  const Example example;
  LimitCall call = example.call();
  const std::vector<std::string> full = call.args;
  const std::vector<std::string> lone =
      limitcounter::detail::lone_consume_args(std::move(call.args));
  // op one: now, record lifetime, the program and its names, the counter set's name and text, the
  // transaction's fingerprint, amount and fields (lua/limit.lua's contract)
  CHECK(lone == std::vector<std::string>{"one", full[2], full[3], full[6], full[7], full[10],
                                         full[11], full[12], full[13], full[14]});
}

TEST_CASE("a call built from a kept template is the call built afresh", "[limit-codec]") {
  // The rule set's args make a call's template reusable (one per thread and rules and windows).
  Example example;
  limitcounter::RuleSet rules;
  rules.add(example.day_count).add(example.day_amount).add(example.month);
  const RuleSetArgs args(rules, example.keys);
  const auto& set = rules.rules();
  const auto build = [&](const Transaction& tx, const RuleSetArgs* rule_args) {
    DecideContext context = example.context;
    context.rule_args = rule_args;
    return build_decide(limitcounter::LimitOp::consume, tx, {&example.single},
                        {&set[0], &set[1], &set[2]}, context);
  };
  Transaction tx = example.tx;
  for (int round = 0; round < 2; ++round) { // the first builds the template, the second reuses it
    for (const char* merchant : {"m1", "m2"}) {
      tx.id = std::string("t-") + merchant;
      tx.attributes["merchant"] = merchant;
      const LimitCall kept = build(tx, &args);
      const LimitCall fresh = build(tx, nullptr);
      CHECK(kept.keys == fresh.keys);
      CHECK(kept.args == fresh.args);
      CHECK(kept.args.back() == std::string("cmb:") + merchant);
    }
  }
  // the next day's windows: other keys, not the kept template's
  tx.time += 24h;
  DecideContext next_day = example.context;
  next_day.now = tx.time;
  next_day.rule_args = &args;
  const LimitCall later = build_decide(limitcounter::LimitOp::consume, tx, {&example.single},
                                       {&set[0], &set[1], &set[2]}, next_day);
  CHECK(later.keys[2] == "p:{dept}:day:20211113");
  // another rule set's args (even at the same address later) never reuse this one's template
  const RuleSetArgs other(rules, example.keys);
  CHECK(other.id() != args.id());
}

TEST_CASE("fingerprints tell another use of an id from a retry", "[limit-codec]") {
  Example example;
  const std::string first = fingerprint(limitcounter::LimitOp::consume, example.tx);
  CHECK(first.size() == 11);
  CHECK(
      first.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") ==
      std::string::npos);
  CHECK(fingerprint(limitcounter::LimitOp::consume, example.tx) == first);
  CHECK(fingerprint(limitcounter::LimitOp::reserve, example.tx) != first);
  Transaction other = example.tx;
  other.amount = 43; // the amount travels, and is compared, apart
  CHECK(fingerprint(limitcounter::LimitOp::consume, other) == first);
  other = example.tx;
  other.attributes["merchant"] = "m2";
  CHECK(fingerprint(limitcounter::LimitOp::consume, other) != first);
  // no split of the same characters into other attributes gives the same digest
  Transaction joined = example.tx;
  joined.attributes = {{"m", "1|n=2"}};
  Transaction split = example.tx;
  split.attributes = {{"m", "1"}, {"n", "2"}};
  CHECK(fingerprint(limitcounter::LimitOp::consume, joined) !=
        fingerprint(limitcounter::LimitOp::consume, split));
}

TEST_CASE("a counter set lives in its record's slot", "[limit-codec]") {
  CHECK(counter_set_key("p:tx:{a:tx:b}", "00ff") == "p:cs:00ff");
  CHECK(counter_set_key("trans:limit:tx:{t1}", "ab") == "trans:limit:cs:ab");
  CHECK(counter_set_key("p:{7:merchant}:tx:t1", "ab") == "p:{7:merchant}:cs:ab");
}

TEST_CASE("calls batch into one script call, each rule program and counter set once",
          "[limit-codec]") {
  Example example;
  LimitCall first = example.call();
  example.tx.id = "t2";
  LimitCall second = example.call();
  example.tx.id = "t3";
  const LimitCall other = build_decide(limitcounter::LimitOp::consume, example.tx, {},
                                       {&example.month}, example.context);
  const std::vector<std::string> set_keys(first.keys.begin() + 1, first.keys.end());
  DecideBatch batch;
  batch.add(std::move(first.keys), std::move(first.args));
  batch.add(std::move(second.keys), std::move(second.args));
  batch.add(std::vector<std::string>(other.keys), std::vector<std::string>(other.args));
  CHECK(batch.size() == 3);
  const auto [batch_keys, args] = batch.take();
  CHECK(batch.size() == 0);
  // the records, then each counter set's key, counters and hold sets once
  REQUIRE(batch_keys.size() == 3 + set_keys.size() + other.keys.size() - 1);
  CHECK(std::vector<std::string>(batch_keys.begin(), batch_keys.begin() + 3) ==
        std::vector<std::string>{"p:tx:{t1}", "p:tx:{t2}", "p:tx:{t3}"});
  CHECK(std::vector<std::string>(batch_keys.begin() + 3,
                                 batch_keys.begin() + 3 + static_cast<long>(set_keys.size())) ==
        set_keys);
  CHECK(batch_keys.back() == other.keys.back());
  REQUIRE(args.size() == 6 + 2 * 2 + 1 + 2 * 3 + 1);
  CHECK(args[0] == "batch");
  CHECK(args[1] == "3");
  CHECK(args[5] == "2"); // two programs: the 4 rules, and the month rule alone
  CHECK(args[7] == "single bank-day bank-day-amount merchant-month");
  CHECK(args[9] == "merchant-month");
  CHECK(args[10] == "2");     // two counter sets
  CHECK(args[11] == "1");     // of program 1
  CHECK(args[11 + 3] == "2"); // of program 2
  // the transactions: one argument
  const std::vector<std::string> transactions = msgpack_strings(args.back());
  REQUIRE(transactions.size() == 3 * 4);
  CHECK(transactions[0] == "1"); // t1: counter set 1
  CHECK(transactions[1] == fingerprint(limitcounter::LimitOp::consume, example.tx));
  CHECK(transactions[3] == "cmb:m1");
  CHECK(transactions[4] == "1"); // t2: counter set 1
  CHECK(transactions[8] == "2"); // the month-only transaction: counter set 2
  CHECK(transactions[11] == "m1");

  // with one counter set, the transactions name none
  example.tx.id = "t4";
  LimitCall fourth = example.call();
  example.tx.id = "t5";
  LimitCall fifth = example.call();
  DecideBatch one_set;
  one_set.add(std::move(fourth.keys), std::move(fourth.args));
  one_set.add(std::move(fifth.keys), std::move(fifth.args));
  const auto [one_keys, one_args] = one_set.take();
  REQUIRE(one_args.size() == 6 + 2 + 1 + 3 + 1);
  CHECK(one_args[8] == "1"); // one counter set
  const std::vector<std::string> one_set_transactions = msgpack_strings(one_args.back());
  REQUIRE(one_set_transactions.size() == 2 * 3);
  CHECK(one_set_transactions[0] == fingerprint(limitcounter::LimitOp::consume, example.tx));
  CHECK(one_set_transactions[1] == "42");
  CHECK(one_set_transactions[2] == "cmb:m1");
  CHECK(one_set_transactions[5] == "cmb:m1");
}

TEST_CASE("a reversal brings the original transaction's counters", "[limit-codec]") {
  Example example;
  example.context.now = example.tx.time + 24h * 400; // its windows closed long ago
  example.context.refuse_closed_windows = false;
  std::vector<std::string> args{"refund", "-1", ""};
  const std::string counter_set =
      append_original(args, example.tx, {&example.day_count, &example.month}, example.context);
  REQUIRE(args.size() == 10);
  CHECK(args[8] == fingerprint(limitcounter::LimitOp::reserve, example.tx));
  CHECK(args[3] == fingerprint(limitcounter::LimitOp::consume, example.tx));
  CHECK(args[4] == "42");
  CHECK(counter_set == "p:cs:" + args[5]);
  // the decide call's counter set, its expiry too (its windows', whenever the reversal runs)
  CHECK(args[6] == example.call().args[11]);
  CHECK(args[6].substr(args[6].find('\n')) ==
        "\np:{dept}:day:20211112 1\np:{merchant}:month:202111 2\n"
        "p:{dept}:day:20211112:holds\np:{merchant}:month:202111:holds");
  CHECK(args[9] == "cmb:m1");
  // the same counters as the decide call named
  CHECK(args[5] == example.call().args[10]);
  CHECK(std::stoll(args[7]) == unix_millis(example.context.now + 24h));

  example.context.refuse_closed_windows = true;
  args.resize(3);
  CHECK_THROWS_MATCHES(
      append_original(args, example.tx, {&example.day_count}, example.context), Error,
      Catch::Predicate<Error>([](const Error& e) { return has_code(e, errc::window_closed); }));
}

TEST_CASE("decide replies decode into decisions", "[limit-codec]") {
  const Example example;
  const LimitCall call = example.call();
  const auto decode = [&](const Reply& reply) {
    return decode_decision(reply, call.shape, "t1", 42);
  };
  const auto with = [](std::vector<Reply> items, std::initializer_list<Reply> more) {
    items.insert(items.end(), more.begin(), more.end());
    return Reply::array(std::move(items));
  };
  // rule 2 (bank-day, counter 1) denied by count: code 2, c, the totals, rule, metric 1
  const Reply denied = Reply::array(ints({2, 2, 10, 420, 1, 5, 2, 1}));
  const Decision decision = decode(denied);
  CHECK(decision.verdict == Decision::Verdict::denied);
  REQUIRE(decision.denial);
  CHECK(decision.denial->rule == "bank-day");
  CHECK(decision.denial->metric == Metric::count);
  CHECK(decision.denial->limit == 10);
  CHECK(decision.denial->used == 10);
  CHECK(decision.denial->requested == 1);
  REQUIRE(decision.rules.size() == 3); // the window rules; the per-transaction one has no window
  CHECK(decision.rules[0].window_id == "20211112");
  CHECK(decision.rules[0].period == Period::day);
  CHECK(decision.rules[0].remaining_count() == 0);
  CHECK_FALSE(decision.rules[0].remaining_amount());
  CHECK(decision.rules[1].remaining_amount() == 80);
  CHECK(decision.rules[2].used.amount == 5);
  CHECK_FALSE(decision.replayed);

  // allowed (code 1): the totals after the write, no extras
  const Decision allowed = decode(Reply::array(ints({1, 2, 4, 168, 2, 84})));
  CHECK(allowed.allowed());
  CHECK_FALSE(allowed.denial);
  CHECK(allowed.rules.at(0).used.count == 4);
  CHECK(allowed.rules.at(2).used.amount == 84);
  CHECK(decode(Reply::array(ints({3, 2, 0, 0, 0, 0}))).dry_run);

  // the per-transaction rule denies with the transaction's own amount (metric 3)
  const Decision single = decode(Reply::array(ints({2, 2, 0, 0, 0, 0, 1, 3})));
  REQUIRE(single.denial);
  CHECK(single.denial->metric == Metric::single_amount);
  CHECK(single.denial->limit == 1000);
  CHECK(single.denial->requested == 42);

  // a replay: the first verdict and denial, the counters as they are now
  const Decision replayed = decode(with(ints({5, 2, 3, 126, 1, 42}), {str("consumed"), str("")}));
  CHECK(replayed.allowed());
  CHECK(replayed.replayed);
  CHECK(replayed.state == TransactionState::consumed);
  CHECK(replayed.rules.at(0).rule == "bank-day");
  CHECK(replayed.rules.at(0).remaining_count() == 7);
  CHECK_FALSE(replayed.denial);

  const Decision replayed_denial = decode(
      with(ints({5, 2, 0, 0, 3, 880}), {str("denied"), str("merchant-month amount 900 880")}));
  CHECK(replayed_denial.verdict == Decision::Verdict::denied);
  REQUIRE(replayed_denial.denial);
  CHECK(replayed_denial.denial->rule == "merchant-month");
  CHECK(replayed_denial.denial->metric == Metric::amount);
  CHECK(replayed_denial.denial->limit == 900);
  CHECK(replayed_denial.denial->used == 880);
  CHECK(replayed_denial.denial->requested == 42);

  CHECK(decode(Reply::array(ints({7}))).verdict == Decision::Verdict::cancelled);
  CHECK_THROWS_MATCHES(
      decode(Reply::array(ints({6}))), Error,
      Catch::Predicate<Error>([](const Error& e) { return has_code(e, errc::conflict); }));
  // malformed: too short, too long, an unknown code, a denial naming no rule or no metric or a
  // metric its rule does not limit, other counters than the call's, a bad recorded denial
  const auto malformed = [&](const Reply& reply) {
    CHECK_THROWS_MATCHES(decode(reply), Error, Catch::Predicate<Error>([](const Error& e) {
                           return has_code(e, errc::protocol_error);
                         }));
  };
  malformed(Reply::array(ints({2, 1})));
  malformed(Reply::array(ints({1, 2, 0, 0, 0, 0, 0})));
  malformed(Reply::array(ints({9, 2, 0, 0, 0, 0})));
  malformed(Reply::array({str("allowed"), Reply::integer(2)}));
  malformed(Reply::array(ints({2, 2, 0, 0, 0, 0, 9, 1})));
  malformed(Reply::array(ints({2, 2, 0, 0, 0, 0, 2, 7})));
  malformed(Reply::array(ints({2, 2, 0, 0, 0, 0, 2, 2}))); // bank-day limits no amount
  malformed(Reply::array(ints({1, 1, 1, 1})));
  malformed(with(ints({5, 2, 0, 0, 0, 0}), {str("denied"), str("nonsense")}));
  malformed(Reply::integer(1));
  malformed(Reply::array({})); // (the reply fuzzer's find: an empty array was read at [0])

  // an overflow names its counter; the message names its counter and period
  CHECK_THROWS_MATCHES(
      decode(Reply::array(ints({8, 2}))), Error, Catch::Predicate<Error>([](const Error& e) {
        return e.code() == errc::precision_overflow &&
               std::string(e.what()).find("month total of merchant") != std::string::npos;
      }));
  malformed(Reply::array(ints({8, 3})));
}

TEST_CASE("a batch reply splits into its transactions' replies", "[limit-codec]") {
  // allowed (1 counter), a conflict, a denial (rule 1 by amount), an overflow, a replay
  std::vector<Reply> flat = ints({1, 1, 3, 300, 6, 2, 1, 3, 300, 1, 2, 8, 1, 5, 1, 3, 300});
  flat.push_back(Reply::string("consumed"));
  flat.push_back(Reply::string(""));
  const std::vector<Reply> replies = split_decide_replies(Reply::array(flat), 5);
  REQUIRE(replies.size() == 5);
  CHECK(replies[0].as_array().size() == 4);
  CHECK(replies[1].as_array().size() == 1);
  CHECK(replies[2].as_array().size() == 6);
  CHECK(replies[2].at(5).as_integer() == 2);
  CHECK(replies[3].as_array().size() == 2);
  CHECK(replies[4].as_array().size() == 6);
  CHECK(replies[4].at(4).as_string() == "consumed");
  // fewer or more transactions than sent, a cut reply, not an array
  const auto refused = [](const Reply& reply, std::size_t count) {
    CHECK_THROWS_MATCHES(
        split_decide_replies(reply, count), Error, Catch::Predicate<Error>([](const Error& e) {
          return has_code(e, errc::protocol_error) && e.outcome() == limitcounter::Outcome::unknown;
        }));
  };
  refused(Reply::array(flat), 4);
  refused(Reply::array(flat), 6);
  flat.pop_back();
  refused(Reply::array(flat), 5);
  refused(Reply::array(ints({1, 40, 1})), 1);
  refused(Reply::string("allowed"), 1);
}

TEST_CASE("confirm replies decode: a confirm done before is replayed", "[limit-codec]") {
  // lua/limit.lua, and lua/transaction_home.lua on a cluster (its plan last)
  const auto now = decode_confirm(Reply::array({str("confirmed"), str("60"), str("40")}));
  REQUIRE(now);
  CHECK_FALSE(now->replayed);
  CHECK(now->amount == 60);
  CHECK(now->released == 40);
  const auto before =
      decode_confirm(Reply::array({str("already"), str("confirmed"), str("60"), str("plan")}));
  REQUIRE(before);
  CHECK(before->replayed);
  CHECK(before->amount == 60);
  CHECK(before->released == 0);
  // errors are the caller's to name
  CHECK_FALSE(decode_confirm(Reply::array({str("expired"), str("plan")})));
  CHECK_FALSE(decode_confirm(Reply::array({str("bad_state"), str("cancelled")})));
}

TEST_CASE("cancel replies decode: a replay, an expiry and an unknown id are told apart",
          "[limit-codec]") {
  using limitcounter::CancelResult;
  using Status = CancelResult::Status;
  struct Row {
    std::vector<Reply> reply;
    Status status;
    bool replayed;
  };
  const std::vector<Row> rows{
      {{str("cancelled"), str("100")}, Status::cancelled, false},
      {{str("cancelled"), str("100"), str("plan")}, Status::cancelled, false},
      {{str("already"), str("cancelled")}, Status::cancelled, true},
      {{str("already"), str("cancelled"), str("plan")}, Status::cancelled, true},
      {{str("already"), str("voided"), str("plan")}, Status::cancelled, true},
      {{str("already"), str("expired")}, Status::expired, false},
      {{str("already"), str("expired"), str("plan")}, Status::expired, false},
      {{str("tombstone")}, Status::recorded_unknown, false},
  };
  for (const Row& row : rows) {
    const Reply reply = Reply::array(row.reply);
    INFO(reply.debug_string());
    const auto result = decode_cancel(reply, "t1");
    REQUIRE(result);
    CHECK(result->status == row.status);
    CHECK(result->replayed == row.replayed);
  }
  CHECK_FALSE(decode_cancel(Reply::array({str("bad_state"), str("consumed")}), "t1"));
  CHECK_FALSE(decode_cancel(Reply::array({str("unknown")}), "t1"));
  CHECK_THROWS_MATCHES(decode_cancel(Reply::array({str("already"), str("consumed")}), "t1"), Error,
                       Catch::Predicate<Error>([](const Error& e) {
                         return has_code(e, errc::protocol_error) &&
                                e.outcome() == limitcounter::Outcome::unknown &&
                                std::string(e.what()).find("\"t1\"") != std::string::npos;
                       }));
}
