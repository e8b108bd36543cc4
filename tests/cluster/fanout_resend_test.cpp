// The library resends each step of a transaction spread over two cluster slots whose reply was
// lost (RedisOptions::retry, its defaults): the begin and finish at the home record, a share, a
// confirm's, cancel's or refund's home record and fan-out. Each test loses one step's reply
// through the fault proxy after the step ran and proves from the servers (the records, the
// counters, INFO commandstats) that the resend replayed it: the caller gets the first call's
// answer and every shape counts the transaction once. The resends of one operation share one
// budget; a share resent after the sweep abandoned its transaction counts nothing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <tuple>
#include <variant>
#include <vector>

#include <limitcounter/limitcounter.hpp>

#include "cluster/fan_out.hpp"
#include "support/outcome.hpp"

using namespace std::chrono_literals;
using namespace limitcounter;
using namespace limitcounter::testing;

namespace {

struct Resending : FanOut {
  Resending() : FanOut(RetryOptions{}) { two_daily_limits(); }

  // Script calls every node ran.
  long long scripts_run() const {
    long long calls = 0;
    for (RedisServer* node : cluster.nodes()) {
      Redis one(node->options());
      calls += script_calls(one);
    }
    return calls;
  }

  // Runs `call` with the reply of the `nth` script call on `key` lost by `fault`; checks that
  // the fault struck once and that the servers ran more script calls than the `plain` ones of
  // the same call without a fault (the lost one was sent again); returns what `call` returned.
  template <typename Call>
  auto absorbed(const std::string& key, int nth, Fault fault, long long plain, Call&& call) {
    FaultProxy& proxy = lose_reply(key, nth, fault);
    const std::size_t lost_before = proxy.injected(fault);
    const long long before = scripts_run();
    auto result = call();
    CHECK(proxy.injected(fault) == lost_before + 1);
    CHECK(scripts_run() - before > plain);
    return result;
  }

  // Script calls `call` makes without a fault.
  template <typename Call> long long plain_calls(Call&& call) {
    const long long before = scripts_run();
    call();
    return scripts_run() - before;
  }

  std::string state_of(const std::string& key) { return record_field(direct, key, "state"); }
};

using StepKey = std::function<std::string(const std::string&)>;

} // namespace

TEST_CASE_METHOD(Resending,
                 "a consume over two slots whose begin, share or finish reply was lost is resent "
                 "and counted once",
                 "[cluster][proxy][home][resend]") {
  const long long plain = plain_calls([&] { REQUIRE(limits.consume(tx("plain")).allowed()); });
  int counted = 1;
  for (const Fault fault : {Fault::drop_reply, Fault::cut_mid_reply}) {
    for (const auto& [name, step_key, nth] : std::vector<std::tuple<std::string, StepKey, int>>{
             {"begin", [this](const std::string& id) { return home(id); }, 1},
             {"dept share", [this](const std::string& id) { return share("dept", id); }, 1},
             {"merchant share", [this](const std::string& id) { return share("merchant", id); }, 1},
             {"finish", [this](const std::string& id) { return home(id); }, 2}}) {
      INFO("the reply of the " << name << " is lost by " << to_string(fault));
      const std::string id = "c-" + std::to_string(counted);
      const Decision decision =
          absorbed(step_key(id), nth, fault, plain, [&] { return limits.consume(tx(id)); });
      CHECK(decision.allowed());
      // a resent finish finds the decision final: the home record's replay
      CHECK(decision.replayed == (name == "finish"));
      CHECK(state_of(home(id)) == "consumed");
      CHECK(state_of(share("dept", id)) == "consumed");
      CHECK(state_of(share("merchant", id)) == "consumed");
      ++counted;
      CHECK(dept() == Usage{counted, 100 * counted});
      CHECK(merchant() == Usage{counted, 100 * counted});
      CHECK(limits.consume(tx(id)).replayed);
    }
  }
}

TEST_CASE_METHOD(Resending,
                 "consume_many over two slots: a lost reply of a step of the batch is resent and "
                 "each transaction counted once",
                 "[cluster][proxy][home][batch][resend]") {
  const auto batch_of = [&](const std::string& name) {
    std::vector<Transaction> batch;
    for (int i = 0; i < 4; ++i) {
      batch.push_back(tx(name + "-" + std::to_string(i)));
    }
    return batch;
  };
  const long long plain = plain_calls([&] { limits.consume_many(batch_of("plain")); });
  int counted = 4;
  // (the batch call of the dept shares names the first transaction's share record first)
  for (const auto& [name, step_key, call_of, nth] :
       std::vector<std::tuple<std::string, StepKey, int, int>>{
           {"begin", [this](const std::string& id) { return home(id); }, 2, 1},
           {"dept shares", [this](const std::string& id) { return share("dept", id); }, 0, 1},
           {"finish", [this](const std::string& id) { return home(id); }, 2, 2}}) {
    INFO("the reply of the " << name << " call of the batch's transaction " << call_of
                             << " is lost");
    const std::vector<Transaction> batch = batch_of("b" + std::to_string(counted));
    const auto results = absorbed(step_key(batch[call_of].id), nth, Fault::drop_reply, plain,
                                  [&] { return limits.consume_many(batch); });
    REQUIRE(results.size() == batch.size());
    for (std::size_t i = 0; i < batch.size(); ++i) {
      INFO("transaction " << batch[i].id);
      REQUIRE(std::holds_alternative<Decision>(results[i]));
      CHECK(std::get<Decision>(results[i]).allowed());
      CHECK(state_of(home(batch[i].id)) == "consumed");
    }
    counted += 4;
    CHECK(dept() == Usage{counted, 100 * counted});
    CHECK(merchant() == Usage{counted, 100 * counted});
  }
}

TEST_CASE_METHOD(Resending,
                 "reserve and confirm over two slots: lost replies of their steps are resent and "
                 "the holds are counted once",
                 "[cluster][proxy][home][reserve][resend]") {
  const long long plain_reserve =
      plain_calls([&] { REQUIRE(limits.reserve(tx("plain")).allowed()); });
  const long long plain_confirm =
      plain_calls([&] { CHECK(limits.confirm("plain", 10).amount == 10); });
  const auto reserved = [&](const std::string& id, const std::string& key, int nth) {
    const Decision decision = absorbed(key, nth, Fault::drop_reply, plain_reserve,
                                       [&] { return limits.reserve(tx(id)); });
    CHECK(decision.allowed());
    CHECK(state_of(home(id)) == "reserved");
    return decision;
  };
  CHECK_FALSE(reserved("r-begin", home("r-begin"), 1).replayed);
  CHECK_FALSE(reserved("r-share", share("merchant", "r-share"), 1).replayed);
  CHECK(reserved("r-finish", home("r-finish"), 2).replayed);
  CHECK(dept() == Usage{4, 310}); // three holds of 100 and the plain confirm

  // the home record's confirm ran: the resend finds it confirmed and replays it
  const ConfirmResult at_home = absorbed(home("r-begin"), 1, Fault::drop_reply, plain_confirm,
                                         [&] { return limits.confirm("r-begin", 60); });
  CHECK(at_home.replayed);
  CHECK(at_home.amount == 60);
  // the home record decided; the dept share's confirm is the lost one
  const ConfirmResult in_share =
      absorbed(share("dept", "r-share"), 1, Fault::drop_reply, plain_confirm,
               [&] { return limits.confirm("r-share", 70); });
  CHECK_FALSE(in_share.replayed);
  CHECK(in_share.amount == 70);
  CHECK(state_of(share("dept", "r-share")) == "confirmed");
  CHECK(limits.confirm("r-finish", 80).amount == 80);
  CHECK(dept() == Usage{4, 220});
  CHECK(merchant() == Usage{4, 220});
}

TEST_CASE_METHOD(Resending,
                 "cancel and refund over two slots: lost replies of the home record and of a "
                 "share are resent and give back once",
                 "[cluster][proxy][home][resend]") {
  REQUIRE(limits.reserve(tx("plain")).allowed());
  const long long plain_cancel =
      plain_calls([&] { CHECK(limits.cancel("plain").status == CancelResult::Status::cancelled); });
  REQUIRE(limits.reserve(tx("x-home")).allowed());
  REQUIRE(limits.reserve(tx("x-share")).allowed());
  CHECK(outcome(absorbed(home("x-home"), 1, Fault::drop_reply, plain_cancel, [&] {
          return limits.cancel("x-home");
        })) == std::pair(CancelResult::Status::cancelled, true));
  CHECK(outcome(absorbed(share("dept", "x-share"), 1, Fault::drop_reply, plain_cancel, [&] {
          return limits.cancel("x-share");
        })) == std::pair(CancelResult::Status::cancelled, false));
  for (const std::string id : {"x-home", "x-share"}) {
    CHECK(state_of(home(id)) == "cancelled");
    CHECK(state_of(share("dept", id)) == "cancelled");
  }
  CHECK(dept() == Usage{0, 0});
  CHECK(merchant() == Usage{0, 0});

  REQUIRE(limits.consume(tx("paid", 200)).allowed());
  const long long plain_refund =
      plain_calls([&] { CHECK(limits.refund("paid", 10, "plain").refunded_now == 10); });
  const RefundResult at_home = absorbed(home("paid"), 1, Fault::drop_reply, plain_refund,
                                        [&] { return limits.refund("paid", 50, "a"); });
  CHECK(at_home.replayed);
  CHECK(at_home.refunded_now == 50);
  // (a share's fan-out sends a catch-up confirm, then the refund: the refund's reply is lost)
  const RefundResult in_share = absorbed(share("dept", "paid"), 2, Fault::drop_reply, plain_refund,
                                         [&] { return limits.refund("paid", 30, "b"); });
  CHECK_FALSE(in_share.replayed);
  CHECK(in_share.refunded_now == 30);
  CHECK(dept() == Usage{1, 110});
  CHECK(merchant() == Usage{1, 110});
}

TEST_CASE_METHOD(Resending,
                 "the steps of one consume share one retry budget: a third lost reply is unknown "
                 "and the retry replays it",
                 "[cluster][proxy][home][resend]") {
  // three sends in all for the whole consume: the begin's and the share's resends spend them
  lose_reply(home("spent"), 1);
  lose_reply(share("dept", "spent"), 1);
  lose_reply(home("spent"), 2); // after the begin's resend: the finish
  const Error error = error_of([&] { limits.consume(tx("spent")); });
  CHECK(error.outcome() == Outcome::unknown);
  CHECK_THAT(error.what(), Catch::Contains("sent 3 times"));
  CHECK(state_of(home("spent")) == "consumed"); // the finish ran
  CHECK(dept() == Usage{1, 100});
  const Decision retry = limits.consume(tx("spent"));
  CHECK(retry.allowed());
  CHECK(retry.replayed);
  CHECK(dept() == Usage{1, 100});
  CHECK(merchant() == Usage{1, 100});
}

namespace {

// A share call that vanishes (the proxy never sends it) until its 3 s timeout, and a resend
// budget that still allows a resend after it.
struct SlowResending : FanOut {
  SlowResending() : FanOut(RetryOptions{3, 10s, 20ms}, 3s) { two_daily_limits(); }
};

} // namespace

TEST_CASE_METHOD(SlowResending,
                 "a share resent after the sweep abandoned its transaction meets the void's "
                 "tombstone and counts nothing",
                 "[cluster][proxy][home][sweep][resend]") {
  FaultProxy& proxy = proxy_of(share("dept", "late"));
  proxy.add_rule({script_call_with_key_prefix(share("dept", "late")), Fault::blackhole});
  auto caller = std::async(std::launch::async, [&] { return limits.consume(tx("late", 600)); });
  std::this_thread::sleep_for(1500ms); // the share's first send is lost, its resend to come
  const auto swept = reader.finish_interrupted(1s);
  CHECK(std::any_of(swept.begin(), swept.end(), [](const InterruptedFanOut& fan_out) {
    return fan_out.transaction_id == "late" && fan_out.abandoned;
  }));
  // the first send never ran: the sweep left the void's tombstone for the share
  CHECK(direct.command({"GET", share("dept", "late")}).as_string().rfind("v - 0 -", 0) == 0);

  const Decision decision = caller.get(); // the resend met the tombstone
  CHECK(proxy.injected(Fault::blackhole) == 1);
  CHECK(decision.verdict == Decision::Verdict::cancelled);
  CHECK(decision.replayed);
  CHECK(record_field(direct, home("late"), "state") == "voided");
  CHECK(dept() == Usage{});
  CHECK(merchant() == Usage{});
  CHECK(limits.consume(tx("late-next", 100'000)).allowed()); // the quota is whole
}

TEST_CASE_METHOD(Resending,
                 "the sweep resends a take whose reply was lost and abandons the transaction once",
                 "[cluster][proxy][home][sweep][resend]") {
  // A consume left pending: a caller without resends whose finish never reached the server.
  RedisOptions once_options = proxies.options();
  once_options.command_timeout = std::chrono::milliseconds(300);
  once_options.breaker_failures = 0;
  once_options.retry = no_resends();
  LimitCounter once{Redis(once_options), Calendar("UTC"), counter_options()};
  once.set_rules(*limits.rules());
  FaultProxy& proxy = proxy_of(home("pending"));
  proxy.add_rule({script_call_with_key_prefix(home("pending")), Fault::forward, 1}); // the begin
  proxy.add_rule({script_call_with_key_prefix(home("pending")), Fault::close_before_forward});
  CHECK_THROWS_AS(once.consume(tx("pending")), Error);
  REQUIRE(state_of(home("pending")) == "pending");
  REQUIRE(dept() == Usage{1, 100}); // its shares took their part

  // The sweep's take of the record (begun over a second ago) runs, and its reply is lost: the
  // take is sent again, and hands over what the first one did (the abandonment is as old as
  // the begin it judged, not new).
  std::this_thread::sleep_for(1100ms);
  const long long before = scripts_run();
  lose_reply(home("pending"));
  const auto swept = limits.finish_interrupted(1s);
  CHECK(proxy.injected(Fault::drop_reply) == 1);
  CHECK(std::count_if(swept.begin(), swept.end(), [](const InterruptedFanOut& fan_out) {
          return fan_out.transaction_id == "pending" && fan_out.abandoned;
        }) == 1);
  // the take twice, the two shares' voids and the close: five script calls
  CHECK(scripts_run() - before == 5);
  CHECK(state_of(home("pending")) == "voided");
  CHECK(dept() == Usage{});
  CHECK(merchant() == Usage{});
  const Decision retry = limits.consume(tx("pending"));
  CHECK(retry.verdict == Decision::Verdict::cancelled);
  CHECK(retry.replayed);
}
