// A consume spread over two slots whose caller is slow at one step: the fault proxy holds one
// of its script calls for 3 s (delay_forward: the command reaches the server late, as over a
// slow network) while the sweep (finish_interrupted, 1 s) abandons the pending transaction.
// Whichever step was late, nothing stays counted: the sweep voids every share (a share without
// a record keeps a void tombstone, so its decision arriving later counts nothing) and the
// caller is not told "allowed".
#include <catch2/catch.hpp>

#include <algorithm>
#include <future>
#include <optional>
#include <string>
#include <thread>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/limitcounter.hpp>

#include "redis/key_slot.hpp"
#include "support/fault_proxy.hpp"
#include "support/probe.hpp"
#include "support/redis_cluster.hpp"

using namespace std::chrono_literals;
using namespace limitcounter;
using namespace limitcounter::testing;

namespace {

struct LateStep {
  RedisCluster& cluster = shared_cluster();
  ClusterFaultProxy proxies{cluster};
  std::string prefix = unique_prefix() + "late:";
  Redis through{[this] {
    RedisOptions options = proxies.options();
    options.command_timeout = 10s; // the caller waits for its late step
    options.breaker_failures = 0;
    return options;
  }()};
  Redis direct{cluster.options()};
  LimitCounter limits{through, Calendar("UTC"), counter_options()};
  LimitCounter sweeper{direct, Calendar("UTC"), counter_options()};

  LateStep() {
    REQUIRE(detail::key_slot("{dept}") != detail::key_slot("{merchant}"));
    const RuleSet rules =
        RuleSet()
            .add(Rule("dept-day").where("dept").per(Period::day).max_amount(1000))
            .add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(1'000'000));
    limits.set_rules(rules);
    sweeper.set_rules(rules);
    // a first script call answered NOSCRIPT (or "Function not found") would be a call more on the
    // key
    cluster.load_scripts();
  }

  LimitCounterOptions counter_options() const {
    LimitCounterOptions options;
    options.key_prefix = prefix;
    return options;
  }
  static Transaction tx(const std::string& id, std::int64_t amount) {
    return Transaction{id, {{"merchant", "m-" + id}, {"dept", "d-" + id}}, amount};
  }
  Usage usage_of(const std::string& shape, const std::string& id) {
    return sweeper.usage(shape, Dimension{shape.substr(0, 1) + "-" + id}, Period::day);
  }
  std::string home(const std::string& id) const { return prefix + "tx:{" + id + "}"; }
  std::string share(const std::string& shape, const std::string& id) const {
    return prefix + "{" + shape + "}:tx:" + id;
  }

  // Holds the `nth` script call on `key` for 3 s before it reaches the server.
  void delay_at(const std::string& key, int nth) {
    FaultProxy& proxy = proxies.proxy_of(cluster.owner_of(detail::key_slot(key)));
    if (nth > 1) {
      proxy.add_rule({script_call_with_key_prefix(key), Fault::forward, nth - 1});
    }
    FaultRule late{script_call_with_key_prefix(key), Fault::delay_forward};
    late.delay = 3s;
    proxy.add_rule(late);
  }

  // Runs the consume of `id` while the sweep abandons it; returns the caller's decision, if it
  // got one (an error is as good an answer: it was not allowed).
  std::optional<Decision> consume_while_swept(const std::string& id) {
    auto caller = std::async(std::launch::async, [&] { return limits.consume(tx(id, 600)); });
    std::this_thread::sleep_for(1500ms);
    const auto swept = sweeper.finish_interrupted(1s);
    const bool abandoned = std::any_of(swept.begin(), swept.end(), [&](const auto& fan_out) {
      return fan_out.transaction_id == id && fan_out.abandoned;
    });
    CHECK(abandoned);
    try {
      return caller.get();
    } catch (const Error&) {
      return std::nullopt;
    }
  }
};

} // namespace

TEST_CASE_METHOD(LateStep,
                 "a share decided after the sweep abandoned its transaction counts "
                 "nothing",
                 "[cluster][proxy][home][sweep]") {
  delay_at(share("dept", "late-share"), 1);
  const auto decision = consume_while_swept("late-share");
  if (decision) {
    CHECK_FALSE(decision->allowed());
  }
  // the share's decision did reach the server, after the sweep: it met the void's tombstone
  CHECK(record_field(direct, home("late-share"), "state") == "voided");
  CHECK(usage_of("dept", "late-share") == Usage{});
  CHECK(usage_of("merchant", "late-share") == Usage{});
  // the quota is whole
  CHECK(limits.consume(tx("late-share-next", 1000)).allowed());
}

TEST_CASE_METHOD(LateStep,
                 "the sweep voids a transaction whose caller is between its shares and its "
                 "finish",
                 "[cluster][proxy][home][sweep]") {
  delay_at(home("late-finish"), 2); // the begin goes, the finish is late
  const auto decision = consume_while_swept("late-finish");
  if (decision) {
    CHECK_FALSE(decision->allowed());
  }
  CHECK(record_field(direct, home("late-finish"), "state") == "voided");
  CHECK(usage_of("dept", "late-finish") == Usage{});
  CHECK(usage_of("merchant", "late-finish") == Usage{});
  // the same id again is answered from the home record: never allowed
  CHECK_FALSE(limits.consume(tx("late-finish", 600)).allowed());
  CHECK(usage_of("dept", "late-finish") == Usage{});
}
