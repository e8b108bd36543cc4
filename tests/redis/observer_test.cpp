#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include <limitcounter/limit_counter.hpp>
#include <limitcounter/prometheus.hpp>

// The example's server: the test scrapes what a Prometheus server would.
#include "../../examples/metrics_http.hpp"
#include "support/redis_server.hpp"
#include "support/topology.hpp"

using namespace std::chrono_literals;
using limitcounter::CapRequest;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::LimitCounter;
using limitcounter::LimitCounterOptions;
using limitcounter::Period;
using limitcounter::PrometheusObserver;
using limitcounter::Redis;
using limitcounter::Rule;
using limitcounter::RuleSet;
using limitcounter::Transaction;
using limitcounter::testing::test_options;
using limitcounter::testing::unique_prefix;

namespace {

struct ObserverFixture {
  std::shared_ptr<PrometheusObserver> metrics = std::make_shared<PrometheusObserver>();
  Redis redis{test_options()};
  LimitCounter limits{redis, limitcounter::Calendar("Asia/Shanghai"), options()};

  LimitCounterOptions options() const {
    LimitCounterOptions o;
    o.key_prefix = unique_prefix() + "obs:";
    o.observer = metrics;
    return o;
  }

  bool has(const std::string& line) const {
    return metrics->render().find("\n" + line + "\n") != std::string::npos;
  }
};

Transaction payment(const std::string& id) { return Transaction{id, {{"merchant", "m1"}}, 100}; }

} // namespace

TEST_CASE_METHOD(ObserverFixture, "PrometheusObserver counts real decisions, caps and hits",
                 "[observer][redis]") {
  limits.set_rules(
      RuleSet().add(Rule("merchant-day").where("merchant").per(Period::day).max_count(2)));
  CHECK(limits.consume(payment("tx-1")).allowed());
  CHECK(limits.consume(payment("tx-2")).allowed()); // 2 of 2: near the limit
  CHECK_FALSE(limits.consume(payment("tx-3")).allowed());
  CHECK(limits.consume(payment("tx-3")).replayed); // a retry: the first decision again
  CHECK_FALSE(limits.check(payment("tx-4")).allowed());

  CHECK(limits.take_daily_cap("sms", "acct-1", 1).allowed);
  CHECK_FALSE(limits.take_daily_cap("sms", "acct-1", 1).allowed);
  const auto batch = limits.take_daily_cap_many({CapRequest{"sms", "acct-2", 1}, //
                                                 CapRequest{"sms", "acct-2", 1}});
  REQUIRE(batch.size() == 2);
  CHECK(limits.hit_sliding_window("login", "acct-1", 1, 60s).allowed);
  CHECK_FALSE(limits.hit_sliding_window("login", "acct-1", 1, 60s).allowed);
  CHECK_THROWS_MATCHES(
      limits.take_daily_cap("sms", "bad subject", 1), Error,
      Catch::Predicate<Error>([](const Error& e) { return e.code() == errc::invalid_argument; }));

  CHECK(has(R"(limitcounter_decisions_total{op="check",verdict="denied",rule="merchant-day"} 1)"));
  CHECK(has(R"(limitcounter_decisions_total{op="count",verdict="allowed",rule=""} 2)"));
  CHECK(has(R"(limitcounter_decisions_total{op="count",verdict="denied",rule="merchant-day"} 2)"));
  CHECK(has(R"(limitcounter_decision_seconds_count{op="count"} 4)"));
  CHECK(has(R"(limitcounter_decision_seconds_count{op="check"} 1)"));
  CHECK(has("limitcounter_replayed_total 1"));
  CHECK(has("limitcounter_degraded_total 0"));
  CHECK(has(R"(limitcounter_near_limit_total{rule="merchant-day"} 1)"));
  CHECK(has(
      R"(limitcounter_limiter_decisions_total{kind="daily_cap",name="sms",verdict="allowed"} 2)"));
  CHECK(has(
      R"(limitcounter_limiter_decisions_total{kind="daily_cap",name="sms",verdict="refused"} 2)"));
  CHECK(has(
      R"(limitcounter_limiter_decisions_total{kind="sliding_window",name="login",verdict="allowed"} 1)"));
  CHECK(has(
      R"(limitcounter_limiter_decisions_total{kind="sliding_window",name="login",verdict="refused"} 1)"));
  CHECK(has(R"(limitcounter_limiter_decision_seconds_count{kind="daily_cap"} 4)"));
  CHECK(has(R"(limitcounter_limiter_decision_seconds_count{kind="sliding_window"} 2)"));
  // The bad subject was refused before anything was sent, and is not a label.
  CHECK(has(R"(limitcounter_errors_total{code="invalid_argument",outcome="not_sent"} 1)"));
  CHECK(metrics->render().find("acct-") == std::string::npos);
}

TEST_CASE_METHOD(ObserverFixture, "GET /metrics over HTTP serves what render() gives",
                 "[observer][redis]") {
  limits.hit_sliding_window("login", "acct-1", 5, 60s);
  const example::MetricsHttpServer server([this] { return metrics->render(); }, 0);

  const std::string scrape = example::http_get(server.port(), "/metrics");
  const auto body_at = scrape.find("\r\n\r\n");
  REQUIRE(body_at != std::string::npos);
  CHECK(scrape.rfind("HTTP/1.0 200 OK\r\n", 0) == 0);
  CHECK_THAT(scrape.substr(0, body_at),
             Catch::Contains("Content-Type: text/plain; version=0.0.4; charset=utf-8"));
  CHECK(scrape.substr(body_at + 4) == metrics->render());
  CHECK_THAT(scrape,
             Catch::Contains(R"(limitcounter_limiter_decisions_total{kind="sliding_window",)"
                             R"(name="login",verdict="allowed"} 1)"));
  CHECK(example::http_get(server.port(), "/").rfind("HTTP/1.0 404 Not Found\r\n", 0) == 0);
}
