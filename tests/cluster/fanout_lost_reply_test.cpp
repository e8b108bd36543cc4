// A transaction spread over two cluster slots, with the reply of each step of its fan-out lost
// in turn (the home record's begin and finish, each share, a void): the call says the outcome
// is unknown, the step ran on its node, and the same id sent again finishes the transaction
// with every shape counted exactly once. The library's own resends are off here (the host's
// retry is what is tested); tests/cluster/fanout_resend_test.cpp has them on.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <variant>
#include <vector>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/limitcounter.hpp>

#include "cluster/fan_out.hpp"
#include "redis/key_slot.hpp"

using namespace std::chrono_literals;
using namespace limitcounter;
using namespace limitcounter::testing;

TEST_CASE_METHOD(FanOut, "a lost reply at each step of an allowed fan-out: the retry finishes it",
                 "[cluster][proxy][home]") {
  two_daily_limits();
  int counted = 0;
  for (const auto& [name, step_key, nth] :
       std::vector<std::tuple<std::string, std::function<std::string(const std::string&)>, int>>{
           {"begin", [this](const std::string& id) { return home(id); }, 1},
           {"dept share", [this](const std::string& id) { return share("dept", id); }, 1},
           {"merchant share", [this](const std::string& id) { return share("merchant", id); }, 1},
           {"finish", [this](const std::string& id) { return home(id); }, 2}}) {
    INFO("the reply of the " << name << " is lost");
    const std::string id = "allowed-" + std::to_string(counted);
    const std::string key = step_key(id);
    FaultProxy& proxy = lose_reply(key, nth);
    const std::size_t lost_before = proxy.injected(Fault::drop_reply);
    const Error lost = error_of([&] { limits.consume(tx(id)); });
    CHECK(lost.outcome() == Outcome::unknown);
    CHECK(proxy.injected(Fault::drop_reply) == lost_before + 1);
    CHECK(direct.command({"EXISTS", key}).as_integer() == 1); // the step ran on its node

    const Decision retry = limits.consume(tx(id));
    CHECK(retry.allowed());
    CHECK(limits.consume(tx(id)).replayed);
    ++counted;
    CHECK(dept() == Usage{counted, 100 * counted});
    CHECK(merchant() == Usage{counted, 100 * counted});
  }
}

// consume_many sends each step of all its transactions in one pipeline (one per node), and the
// shares of one slot in one batch call: a lost reply leaves every transaction of that call (or
// of that pipeline) unknown, and the same batch again finishes each of them once.
TEST_CASE_METHOD(FanOut,
                 "consume_many: a lost reply at each step of the batch's fan-out, the same batch "
                 "again counts each transaction once",
                 "[cluster][proxy][home][batch]") {
  two_daily_limits();
  int counted = 0;
  // (the batch call of the dept shares names the first transaction's share record first; a
  // home record's state after its step: pending after begin, consumed after finish)
  for (const auto& [name, step_key, call_of, nth, home_state] :
       std::vector<std::tuple<std::string, std::function<std::string(const std::string&)>, int, int,
                              std::string>>{
           {"begin", [this](const std::string& id) { return home(id); }, 2, 1, "pending"},
           {"dept shares", [this](const std::string& id) { return share("dept", id); }, 0, 1, ""},
           {"finish", [this](const std::string& id) { return home(id); }, 2, 2, "consumed"}}) {
    INFO("the reply of the " << name << " call of the batch's transaction " << call_of
                             << " is lost");
    std::vector<Transaction> batch;
    for (int i = 0; i < 4; ++i) {
      batch.push_back(tx("batch-" + std::to_string(counted) + "-" + std::to_string(i)));
    }
    FaultProxy& proxy = lose_reply(step_key(batch[call_of].id), nth);
    const std::size_t lost_before = proxy.injected(Fault::drop_reply);
    const auto lost = limits.consume_many(batch);
    REQUIRE(lost.size() == batch.size());
    CHECK(proxy.injected(Fault::drop_reply) == lost_before + 1);
    // the step ran on its node for the transactions of the lost call
    if (home_state.empty()) {
      CHECK(direct.command({"EXISTS", step_key(batch[2].id)}).as_integer() == 1);
    } else {
      CHECK(testing::record_field(direct, home(batch[2].id), "state") == home_state);
    }
    const auto* error = std::get_if<Error>(&lost[2]);
    REQUIRE(error);
    CHECK(error->outcome() == Outcome::unknown);
    for (const auto& result : lost) { // each one's outcome: decided, or unknown
      if (const auto* other = std::get_if<Error>(&result)) {
        CHECK(other->outcome() == Outcome::unknown);
      }
    }
    // A lost home record reply fails the calls of its node only: a transaction whose home record
    // is on another master is decided.
    const auto home_node = [this](const std::string& id) {
      return &cluster.owner_of(detail::key_slot(home(id)));
    };
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (!home_state.empty() && home_node(batch[i].id) != home_node(batch[2].id)) {
        INFO("transaction " << batch[i].id << ", its home record on another master");
        CHECK(std::holds_alternative<Decision>(lost[i]));
      }
    }

    for (const auto& result : limits.consume_many(batch)) {
      REQUIRE(std::holds_alternative<Decision>(result));
      CHECK(std::get<Decision>(result).allowed());
    }
    for (const auto& result : limits.consume_many(batch)) {
      REQUIRE(std::holds_alternative<Decision>(result));
      CHECK(std::get<Decision>(result).replayed);
    }
    counted += 4;
    CHECK(dept() == Usage{counted, 100 * counted});
    CHECK(merchant() == Usage{counted, 100 * counted});
  }
}

TEST_CASE_METHOD(FanOut, "a lost reply of a void: the retry replays the denial and gives back",
                 "[cluster][proxy][home]") {
  limits.set_rules(
      RuleSet()
          .add(Rule("dept-day").where("dept").per(Period::day).max_amount(100'000))
          .add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(50)));
  // the dept share counts (its first call), then is voided (its second): lose the void's reply
  FaultProxy& proxy = lose_reply(share("dept", "denied"), 2);
  const Error lost = error_of([&] { limits.consume(tx("denied")); });
  CHECK(lost.outcome() == Outcome::unknown);
  CHECK(proxy.injected(Fault::drop_reply) == 1);
  CHECK(testing::record_field(direct, share("dept", "denied"), "state") == "voided");

  const Decision retry = limits.consume(tx("denied"));
  CHECK(retry.replayed);
  CHECK_FALSE(retry.allowed());
  REQUIRE(retry.denial);
  CHECK(retry.denial->rule == "merchant-day");
  CHECK(dept() == Usage{0, 0});
  CHECK(merchant() == Usage{0, 0});
}

// A reserve whose caller died after its shares and before its finish (the home record stays
// pending), sent again after the shares' holds ran out and another reserve released them: the
// retry replays shares that hold nothing. The home record keeps the first caller's hold expiry,
// so a confirm answers "expired" and the limit holds; with the retry's own (later) expiry the
// confirm was taken at the home record while no share counted it (review of 2026-11-26).
TEST_CASE_METHOD(FanOut,
                 "a reserve finished late for a caller that died keeps its first hold: the "
                 "confirm answers expired and nothing is counted twice",
                 "[cluster][proxy][home][reserve]") {
  const auto short_holds = limits_holding_for(300ms);
  // the begin runs, then the connection closes before the finish is sent: it never runs
  FaultProxy& proxy = proxies.proxy_of(cluster.owner_of(detail::key_slot(home("late"))));
  proxy.add_rule({script_call_with_key_prefix(home("late")), Fault::forward, 1});
  proxy.add_rule({script_call_with_key_prefix(home("late")), Fault::close_before_forward});
  CHECK(error_of([&] { short_holds->reserve(tx("late")); }).outcome() == Outcome::unknown);
  CHECK(proxy.injected(Fault::close_before_forward) == 1);
  CHECK(testing::record_field(direct, home("late"), "state") == "pending");
  // a reserve's begin records its hold expiry
  const std::string first_hold = testing::record_field(direct, home("late"), "hexp");
  CHECK(!first_hold.empty());
  CHECK(dept() == Usage{1, 100}); // both shares hold it
  CHECK(merchant() == Usage{1, 100});

  std::this_thread::sleep_for(600ms);                   // past the hold and its grace
  REQUIRE(short_holds->reserve(tx("other")).allowed()); // releases the expired holds
  CHECK(testing::record_field(direct, share("dept", "late"), "state") == "expired");
  CHECK(testing::record_field(direct, share("merchant", "late"), "state") == "expired");
  CHECK(dept() == Usage{1, 100}); // "other" alone
  CHECK(merchant() == Usage{1, 100});

  short_holds->reserve(tx("late")); // finishes the pending home record
  CHECK(testing::record_field(direct, home("late"), "state") == "reserved");
  CHECK(testing::record_field(direct, home("late"), "hexp") == first_hold);
  const Error expired = error_of([&] { short_holds->confirm("late"); });
  CHECK(expired.code() == errc::conflict);
  CHECK(expired.outcome() == Outcome::failed);
  CHECK(std::string(expired.what()).find("expired") != std::string::npos);
  CHECK(testing::record_field(direct, home("late"), "state") == "expired");

  CHECK(dept() == Usage{1, 100}); // "other" alone, still
  CHECK(merchant() == Usage{1, 100});
  // the limit of 150 holds: another 100 would be denied (a check releases no hold, so this does
  // not depend on whether "other" has expired by now)
  CHECK_FALSE(short_holds->check(tx("third")).allowed());
}

// The other side of the test above: a first caller that died after its begin and before any
// share ran holds nothing, so the retry decides every share afresh and its own hold counts.
TEST_CASE_METHOD(FanOut,
                 "a reserve whose first caller died before its shares takes the retry's hold",
                 "[cluster][proxy][home][reserve]") {
  const auto short_holds = limits_holding_for(1000ms);
  // the begin runs; each share's connection closes before the share is sent: none runs
  for (const std::string shape : {"dept", "merchant"}) {
    const std::string key = share(shape, "early");
    proxies.proxy_of(cluster.owner_of(detail::key_slot(key)))
        .add_rule({script_call_with_key_prefix(key), Fault::close_before_forward});
  }
  CHECK(error_of([&] { short_holds->reserve(tx("early")); }).outcome() != Outcome::not_sent);
  CHECK(testing::record_field(direct, home("early"), "state") == "pending");
  CHECK(direct.command({"EXISTS", share("dept", "early")}).as_integer() == 0);
  CHECK(direct.command({"EXISTS", share("merchant", "early")}).as_integer() == 0);
  const std::string first_hold = testing::record_field(direct, home("early"), "hexp");

  std::this_thread::sleep_for(1100ms); // past the first caller's hold
  const Decision retry = short_holds->reserve(tx("early"));
  CHECK(retry.allowed());
  CHECK(std::stoll(testing::record_field(direct, home("early"), "hexp")) >
        std::stoll(first_hold) + 1000);
  CHECK(short_holds->confirm("early").amount == 100); // within the retry's hold
  CHECK(dept() == Usage{1, 100});
  CHECK(merchant() == Usage{1, 100});
}

// A confirm taken at the home record whose fan-out stopped before one share followed; by the
// time it is retried (or swept), that share's hold ran out and another reserve released it. The
// confirmed amount then counts at one share only: every retry, and the sweep, must say so
// (conflict, Outcome::unknown, the share named; InterruptedFanOut::shares_lost), never
// "confirmed". The first follow meets the hold already released while the share's record still
// says reserved, a later one the share recorded expired: both are the same lost hold.
TEST_CASE_METHOD(FanOut,
                 "a confirm whose share lost its hold before it followed is reported by every "
                 "retry and by the sweep",
                 "[cluster][proxy][home][reserve]") {
  const auto short_holds = limits_holding_for(300ms);
  // "retried" is retried by the host, "swept" is left to the sweep; the confirm of each runs
  // at its home record, then the dept share's connection closes before the share is sent (the
  // merchant share's too when it is on the same master: one pipeline per master)
  bool merchant_followed = true;
  for (const std::string id : {"retried", "swept"}) {
    REQUIRE(short_holds->reserve(tx(id, 50)).allowed());
    const std::string dept_share = share("dept", id);
    FaultProxy& proxy = proxy_of(dept_share);
    proxy.add_rule({script_call_with_key_prefix(dept_share), Fault::close_before_forward});
    const std::size_t closed_before = proxy.injected(Fault::close_before_forward);
    CHECK(error_of([&] { short_holds->confirm(id); }).outcome() == Outcome::unknown);
    CHECK(proxy.injected(Fault::close_before_forward) == closed_before + 1);
    CHECK(testing::record_field(direct, home(id), "state") == "confirmed");
    CHECK(testing::record_field(direct, dept_share, "state") == "reserved");
    merchant_followed =
        testing::record_field(direct, share("merchant", id), "state") == "confirmed";
  }
  const Usage merchant_after = merchant_followed ? Usage{3, 140} : Usage{1, 40};
  std::this_thread::sleep_for(600ms); // past the shares' holds and their grace
  // (40 fits beside the confirmed 100 under the merchant's 150)
  REQUIRE(short_holds->reserve(tx("other", 40)).allowed()); // releases the expired holds
  CHECK(dept() == Usage{1, 40});                            // "other" alone
  CHECK(merchant() == merchant_after);

  for (int retry = 0; retry < 2; ++retry) {
    INFO("retry " << retry);
    const Error lost = error_of([&] { short_holds->confirm("retried"); });
    CHECK(lost.code() == errc::conflict);
    CHECK(lost.outcome() == Outcome::unknown);
    CHECK_THAT(lost.what(), Catch::Contains("released its hold as expired"));
    CHECK(testing::record_field(direct, share("dept", "retried"), "state") == "expired");
  }
  // (its record still says reserved, "r ...": the sweep is the first to follow; inspect reads a
  // reservation without hold members as expired)
  CHECK(direct.command({"GET", share("dept", "swept")}).as_string().rfind("r ", 0) == 0);
  const auto swept = short_holds->finish_interrupted(std::chrono::seconds(0), 100);
  for (const std::string id : {"retried", "swept"}) {
    INFO(id);
    const auto reported =
        std::find_if(swept.begin(), swept.end(), [&](const InterruptedFanOut& fan_out) {
          return fan_out.transaction_id == id;
        });
    REQUIRE(reported != swept.end());
    CHECK(reported->state == TransactionState::confirmed);
    CHECK(reported->shares_lost == (merchant_followed ? 1U : 2U));
  }
  CHECK(dept() == Usage{1, 40});
  CHECK(merchant() == merchant_after);
}

TEST_CASE_METHOD(FanOut,
                 "confirm and refund with a lost share reply: the retry finishes the fan-out",
                 "[cluster][proxy][home]") {
  two_daily_limits();
  REQUIRE(limits.reserve(tx("held", 300)).allowed());
  // the merchant share's reply to the confirm is lost
  lose_reply(share("merchant", "held"));
  CHECK(error_of([&] { limits.confirm("held", 200); }).outcome() == Outcome::unknown);
  CHECK(testing::record_field(direct, share("merchant", "held"), "state") == "confirmed");
  const ConfirmResult confirmed = limits.confirm("held", 200);
  CHECK(confirmed.replayed);
  CHECK(confirmed.amount == 200);
  CHECK(dept() == Usage{1, 200});
  CHECK(merchant() == Usage{1, 200});

  // the dept share's reply to the refund is lost (the refund's fan-out sends a catch-up confirm,
  // then the refund)
  lose_reply(share("dept", "held"), 2);
  CHECK(error_of([&] { limits.refund("held", 50, "r1"); }).outcome() == Outcome::unknown);
  const RefundResult refunded = limits.refund("held", 50, "r1");
  CHECK(refunded.replayed);
  CHECK(refunded.refunded_now == 50);
  CHECK(dept() == Usage{1, 150});
  CHECK(merchant() == Usage{1, 150});
}

// past the replay horizon a refund with the original records the home record anew
// (adopt) before any share is recorded anew. If that caller stops there (a lost reply, a
// crash), a refund by id finds the adopted home record, is decided there and fanned out to
// shares that have no record ("unknown", unchecked): it answers refunded while no counter moved.
// The host then does what the library asks (retries the lost call with the same original; a
// refund by id that fails is retried with the original): every refund must be given back once.
TEST_CASE_METHOD(FanOut, "a refund by id after an interrupted adopt", "[cluster][proxy][home]") {
  two_daily_limits();
  const Transaction paid = tx("late", 100);
  REQUIRE(limits.consume(paid).allowed());
  // past the horizon: the home record and both share records are gone
  for (const std::string& key : {home("late"), share("dept", "late"), share("merchant", "late")}) {
    REQUIRE(direct.command({"DEL", key}).as_integer() == 1);
  }
  // the refund with the original: its first step (adopt) runs, its reply is lost
  FaultProxy& proxy = lose_reply(home("late"));
  CHECK(error_of([&] { limits.refund(paid, 30, "A"); }).outcome() == Outcome::unknown);
  CHECK(proxy.injected(Fault::drop_reply) == 1);

  // another caller refunds 20 by id
  bool by_id_needs_original = false;
  try {
    const RefundResult by_id = limits.refund("late", 20, "B");
    CHECK(by_id.refunded_now == 20);
    // it said refunded: the counters say so too
    CHECK(dept() == Usage{1, 80});
    CHECK(merchant() == Usage{1, 80});
  } catch (const Error& e) {
    by_id_needs_original = true;
  }
  // the host's retries: the lost call with its original, and a failed refund by id with the
  // original too
  CHECK(limits.refund(paid, 30, "A").refunded_now == 30);
  if (by_id_needs_original) {
    CHECK(limits.refund(paid, 20, "B").refunded_now == 20);
  }
  CHECK(limits.refund(paid, 30, "A").replayed);
  CHECK(dept() == Usage{1, 50});
  CHECK(merchant() == Usage{1, 50});
}

// each master expires keys by its own clock, so a share record gone before its
// home record would let a retried refund, replayed at the home record, give back again in that
// share (recorded anew from the original). A share's record outlives its home record by
// `share_record_margin` (1 h): proven from the servers' side after a consume, and after a
// refund with the original past the horizon records them anew.
TEST_CASE_METHOD(FanOut, "a share's record outlives its home record by an hour",
                 "[cluster][home]") {
  two_daily_limits();
  const auto expires_at = [&](const std::string& key) {
    return direct.command({"PEXPIRETIME", key}).as_integer();
  };
  const auto check_margins = [&](const std::string& id) {
    const long long home_expiry = expires_at(home(id));
    REQUIRE(home_expiry > 0);
    for (const char* counter : {"dept", "merchant"}) {
      INFO(counter << " share of " << id);
      const long long margin = expires_at(share(counter, id)) - home_expiry;
      CHECK(margin >= 3'600'000 - 5'000); // (the two expiries come from two clock readings)
      CHECK(margin <= 3'600'000 + 5'000);
    }
  };
  const Transaction paid = tx("skew", 100);
  REQUIRE(limits.consume(paid).allowed());
  check_margins("skew");

  for (const std::string& key : {home("skew"), share("dept", "skew"), share("merchant", "skew")}) {
    REQUIRE(direct.command({"DEL", key}).as_integer() == 1); // past the horizon
  }
  CHECK(limits.refund(paid, 30, "A").refunded_now == 30);
  check_margins("skew");
  CHECK(limits.refund(paid, 30, "A").replayed);
  CHECK(dept() == Usage{1, 70});
  CHECK(merchant() == Usage{1, 70});
}

// past the horizon, the reply of each step of a refund with the original is
// lost in turn (adopt, the home record's refund, each share's refund): the retry with the same
// original finishes it, and each share gives back once.
TEST_CASE_METHOD(FanOut, "lost replies of a refund with the original", "[cluster][proxy][home]") {
  two_daily_limits();
  int n = 0;
  for (const auto& [name, step_key, nth] :
       std::vector<std::tuple<std::string, std::function<std::string(const std::string&)>, int>>{
           {"adopt", [this](const std::string& id) { return home(id); }, 1},
           {"home refund", [this](const std::string& id) { return home(id); }, 2},
           {"dept share", [this](const std::string& id) { return share("dept", id); }, 2},
           {"merchant share", [this](const std::string& id) { return share("merchant", id); },
            2}}) {
    INFO("the reply of the " << name << " is lost");
    const std::string id = "lost-" + std::to_string(n++);
    const Transaction paid = tx(id, 100);
    REQUIRE(limits.consume(paid).allowed());
    for (const std::string& key : {home(id), share("dept", id), share("merchant", id)}) {
      REQUIRE(direct.command({"DEL", key}).as_integer() == 1);
    }
    FaultProxy& proxy = lose_reply(step_key(id), nth);
    const std::size_t lost_before = proxy.injected(Fault::drop_reply);
    CHECK(error_of([&] { limits.refund(paid, 30, "A"); }).outcome() == Outcome::unknown);
    CHECK(proxy.injected(Fault::drop_reply) == lost_before + 1);
    const RefundResult retried = limits.refund(paid, 30, "A");
    CHECK(retried.refunded_now == 30);
    CHECK(limits.refund(paid, 30, "A").replayed);
    CHECK(limits.refund(id, 30, "A").replayed);
    CHECK(dept() == Usage{n, 70 * n});
    CHECK(merchant() == Usage{n, 70 * n});
  }
}
