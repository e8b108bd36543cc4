#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <limitcounter/prometheus.hpp>

using limitcounter::Decision;
using limitcounter::Denial;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::LimiterKind;
using limitcounter::Metric;
using limitcounter::Outcome;
using limitcounter::PrometheusObserver;
using limitcounter::RuleStatus;
using limitcounter::Transaction;
using namespace std::chrono_literals;

namespace {

// The lines of the family `name` in `text`: from its `# HELP` to the next family's.
std::string family(const std::string& text, const std::string& name) {
  const auto begin = text.find("# HELP " + name + " ");
  REQUIRE(begin != std::string::npos);
  const auto end = text.find("# HELP ", begin + 1);
  return text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

Decision denied_by(const std::string& rule) {
  Decision decision;
  decision.verdict = Decision::Verdict::denied;
  decision.denial = Denial{rule, Metric::amount, 100, 90, 20};
  return decision;
}

const std::string fresh_text =
    R"(# HELP limitcounter_decisions_total Consume, reserve and check decisions.
# TYPE limitcounter_decisions_total counter
# HELP limitcounter_decision_seconds Latency of consume, reserve and check, Redis round trip included.
# TYPE limitcounter_decision_seconds histogram
# HELP limitcounter_degraded_total Decisions taken by a failure policy because Redis could not be reached.
# TYPE limitcounter_degraded_total counter
limitcounter_degraded_total 0
# HELP limitcounter_replayed_total Decisions that replayed an earlier decision of the same transaction id.
# TYPE limitcounter_replayed_total counter
limitcounter_replayed_total 0
# HELP limitcounter_near_limit_total Allowed transactions that left a window of the rule near its limit.
# TYPE limitcounter_near_limit_total counter
# HELP limitcounter_errors_total Errors by code and whether the command ran.
# TYPE limitcounter_errors_total counter
# HELP limitcounter_local_usage_reported_total Usage allowed on a local share while Redis was away, added back to Redis.
# TYPE limitcounter_local_usage_reported_total counter
limitcounter_local_usage_reported_total 0
# HELP limitcounter_limiter_decisions_total Daily cap takes and sliding window hits.
# TYPE limitcounter_limiter_decisions_total counter
# HELP limitcounter_limiter_decision_seconds Latency of daily cap takes and sliding window hits.
# TYPE limitcounter_limiter_decision_seconds histogram
# HELP limitcounter_transitions_total Confirms, cancels and refunds of transactions.
# TYPE limitcounter_transitions_total counter
# HELP limitcounter_transition_seconds Latency of confirm, cancel and refund, Redis round trip included.
# TYPE limitcounter_transition_seconds histogram
# HELP limitcounter_wallet_operations_total Wallet deductions, credits, rollbacks, freezes and unfreezes.
# TYPE limitcounter_wallet_operations_total counter
# HELP limitcounter_wallet_operation_seconds Latency of wallet operations, Redis round trip included.
# TYPE limitcounter_wallet_operation_seconds histogram
# HELP limitcounter_red_packet_operations_total Red packet creates, grabs and closes.
# TYPE limitcounter_red_packet_operations_total counter
# HELP limitcounter_red_packet_operation_seconds Latency of red packet operations, Redis round trip included.
# TYPE limitcounter_red_packet_operation_seconds histogram
# HELP limitcounter_payout_operations_total Payout queue takes, acks and fails.
# TYPE limitcounter_payout_operations_total counter
# HELP limitcounter_payout_operation_seconds Latency of payout queue calls, Redis round trip included.
# TYPE limitcounter_payout_operation_seconds histogram
# HELP limitcounter_payout_tasks_taken_total Payout tasks leased to workers.
# TYPE limitcounter_payout_tasks_taken_total counter
limitcounter_payout_tasks_taken_total 0
# HELP limitcounter_journal_lag_entries Wallet journal events not yet read by the consumer group.
# TYPE limitcounter_journal_lag_entries gauge
# HELP limitcounter_journal_pending_entries Wallet journal events read by the consumer group, not acknowledged.
# TYPE limitcounter_journal_pending_entries gauge
)";

} // namespace

TEST_CASE("PrometheusObserver renders every family, label-less counters at 0, before any event",
          "[prometheus]") {
  const PrometheusObserver observer;
  CHECK(observer.render() == fresh_text);
}

TEST_CASE("PrometheusObserver renders decisions as counters with sorted label sets",
          "[prometheus]") {
  PrometheusObserver observer;
  const Transaction tx;
  using limitcounter::LimitOp;
  Decision allowed;
  observer.on_decision(LimitOp::consume, tx, allowed, 1ms);
  observer.on_decision(LimitOp::consume, tx, denied_by("merchant-daily"), 1ms);
  observer.on_decision(LimitOp::consume, tx, denied_by("merchant-daily"), 1ms);
  observer.on_decision(LimitOp::reserve, tx, allowed, 1ms);
  Decision peek;
  peek.dry_run = true;
  peek.replayed = true;
  observer.on_decision(LimitOp::check, tx, peek, 1ms);
  Decision degraded = denied_by("card-monthly");
  degraded.degraded = true;
  observer.on_decision(LimitOp::consume, tx, degraded, 1ms);

  const std::string text = observer.render();
  CHECK(family(text, "limitcounter_decisions_total") ==
        "# HELP limitcounter_decisions_total Consume, reserve and check decisions.\n"
        "# TYPE limitcounter_decisions_total counter\n"
        "limitcounter_decisions_total{op=\"check\",verdict=\"allowed\",rule=\"\"} 1\n"
        "limitcounter_decisions_total{op=\"consume\",verdict=\"allowed\",rule=\"\"} 1\n"
        "limitcounter_decisions_total{op=\"consume\",verdict=\"denied\",rule=\"card-monthly\"} "
        "1\n"
        "limitcounter_decisions_total{op=\"consume\",verdict=\"denied\",rule=\"merchant-daily\"} "
        "2\n"
        "limitcounter_decisions_total{op=\"reserve\",verdict=\"allowed\",rule=\"\"} 1\n");
  CHECK_THAT(text, Catch::Contains("\nlimitcounter_decision_seconds_count{op=\"reserve\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("\nlimitcounter_degraded_total 1\n"));
  CHECK_THAT(text, Catch::Contains("\nlimitcounter_replayed_total 1\n"));
}

TEST_CASE("PrometheusObserver histograms: cumulative buckets, le inclusive, exact sum and count",
          "[prometheus]") {
  PrometheusObserver observer;
  observer.on_limiter_decision(LimiterKind::daily_cap, "sms", true, 100us);       // le 0.0001
  observer.on_limiter_decision(LimiterKind::daily_cap, "sms", true, 101us);       // le 0.00025
  observer.on_limiter_decision(LimiterKind::daily_cap, "sms", false, 3ms);        // le 0.005
  observer.on_limiter_decision(LimiterKind::daily_cap, "otp", false, 2500ms);     // +Inf only
  observer.on_limiter_decision(LimiterKind::sliding_window, "login", true, -5ms); // clock stepped

  const std::string text = observer.render();
  CHECK(family(text, "limitcounter_limiter_decisions_total") ==
        "# HELP limitcounter_limiter_decisions_total Daily cap takes and sliding window hits.\n"
        "# TYPE limitcounter_limiter_decisions_total counter\n"
        "limitcounter_limiter_decisions_total{kind=\"daily_cap\",name=\"otp\",verdict=\"refused\"} "
        "1\n"
        "limitcounter_limiter_decisions_total{kind=\"daily_cap\",name=\"sms\",verdict=\"allowed\"} "
        "2\n"
        "limitcounter_limiter_decisions_total{kind=\"daily_cap\",name=\"sms\",verdict=\"refused\"} "
        "1\n"
        "limitcounter_limiter_decisions_total{kind=\"sliding_window\",name=\"login\",verdict="
        "\"allowed\"} 1\n");
  const std::string h = "limitcounter_limiter_decision_seconds";
  CHECK(family(text, h) == "# HELP " + h +
                               " Latency of daily cap takes and sliding window hits.\n" +  //
                               "# TYPE " + h + " histogram\n" +                            //
                               h + "_bucket{kind=\"daily_cap\",le=\"0.0001\"} 1\n" +       //
                               h + "_bucket{kind=\"daily_cap\",le=\"0.00025\"} 2\n" +      //
                               h + "_bucket{kind=\"daily_cap\",le=\"0.0005\"} 2\n" +       //
                               h + "_bucket{kind=\"daily_cap\",le=\"0.001\"} 2\n" +        //
                               h + "_bucket{kind=\"daily_cap\",le=\"0.0025\"} 2\n" +       //
                               h + "_bucket{kind=\"daily_cap\",le=\"0.005\"} 3\n" +        //
                               h + "_bucket{kind=\"daily_cap\",le=\"0.01\"} 3\n" +         //
                               h + "_bucket{kind=\"daily_cap\",le=\"0.025\"} 3\n" +        //
                               h + "_bucket{kind=\"daily_cap\",le=\"0.05\"} 3\n" +         //
                               h + "_bucket{kind=\"daily_cap\",le=\"0.1\"} 3\n" +          //
                               h + "_bucket{kind=\"daily_cap\",le=\"0.25\"} 3\n" +         //
                               h + "_bucket{kind=\"daily_cap\",le=\"0.5\"} 3\n" +          //
                               h + "_bucket{kind=\"daily_cap\",le=\"1\"} 3\n" +            //
                               h + "_bucket{kind=\"daily_cap\",le=\"+Inf\"} 4\n" +         //
                               h + "_sum{kind=\"daily_cap\"} 2.503201\n" +                 //
                               h + "_count{kind=\"daily_cap\"} 4\n" +                      //
                               h + "_bucket{kind=\"sliding_window\",le=\"0.0001\"} 1\n" +  //
                               h + "_bucket{kind=\"sliding_window\",le=\"0.00025\"} 1\n" + //
                               h + "_bucket{kind=\"sliding_window\",le=\"0.0005\"} 1\n" +  //
                               h + "_bucket{kind=\"sliding_window\",le=\"0.001\"} 1\n" +   //
                               h + "_bucket{kind=\"sliding_window\",le=\"0.0025\"} 1\n" +  //
                               h + "_bucket{kind=\"sliding_window\",le=\"0.005\"} 1\n" +   //
                               h + "_bucket{kind=\"sliding_window\",le=\"0.01\"} 1\n" +    //
                               h + "_bucket{kind=\"sliding_window\",le=\"0.025\"} 1\n" +   //
                               h + "_bucket{kind=\"sliding_window\",le=\"0.05\"} 1\n" +    //
                               h + "_bucket{kind=\"sliding_window\",le=\"0.1\"} 1\n" +     //
                               h + "_bucket{kind=\"sliding_window\",le=\"0.25\"} 1\n" +    //
                               h + "_bucket{kind=\"sliding_window\",le=\"0.5\"} 1\n" +     //
                               h + "_bucket{kind=\"sliding_window\",le=\"1\"} 1\n" +       //
                               h + "_bucket{kind=\"sliding_window\",le=\"+Inf\"} 1\n" +    //
                               h + "_sum{kind=\"sliding_window\"} 0\n" +                   //
                               h + "_count{kind=\"sliding_window\"} 1\n");
}

TEST_CASE("PrometheusObserver escapes label values", "[prometheus]") {
  CHECK(limitcounter::escape_label_value("plain") == "plain");
  CHECK(limitcounter::escape_label_value("a\\b\"c\nd") == "a\\\\b\\\"c\\nd");

  PrometheusObserver observer;
  RuleStatus status;
  status.rule = "say \"hi\"\\\n";
  observer.on_near_limit(Transaction{}, status);
  CHECK(family(observer.render(), "limitcounter_near_limit_total") ==
        "# HELP limitcounter_near_limit_total Allowed transactions that left a window of the rule "
        "near its limit.\n"
        "# TYPE limitcounter_near_limit_total counter\n"
        "limitcounter_near_limit_total{rule=\"say \\\"hi\\\"\\\\\\n\"} 1\n");
}

TEST_CASE("PrometheusObserver counts errors by code and outcome, and local usage reports",
          "[prometheus]") {
  PrometheusObserver observer;
  observer.on_error(Error(errc::timeout, "no reply from 127.0.0.1:1 tx-secret", Outcome::unknown));
  observer.on_error(Error(errc::timeout, "again", Outcome::unknown));
  observer.on_error(Error(errc::invalid_argument, "bad amount -1"));
  observer.on_local_usage_reported("lc:{m1}:daily", "m1", limitcounter::Usage{2, 300});

  const std::string text = observer.render();
  CHECK(family(text, "limitcounter_errors_total") ==
        "# HELP limitcounter_errors_total Errors by code and whether the command ran.\n"
        "# TYPE limitcounter_errors_total counter\n"
        "limitcounter_errors_total{code=\"invalid_argument\",outcome=\"not_sent\"} 1\n"
        "limitcounter_errors_total{code=\"timeout\",outcome=\"unknown\"} 2\n");
  CHECK_THAT(text, Catch::Contains("\nlimitcounter_local_usage_reported_total 1\n"));
  // Messages, keys and fields never become labels.
  CHECK_THAT(text, !Catch::Contains("tx-secret") && !Catch::Contains("lc:{m1}"));
}

TEST_CASE("PrometheusObserver bounds the series of a family", "[prometheus]") {
  PrometheusObserver observer(2);
  for (const char* rule : {"r1", "r2", "r3", "r4", "r1"}) {
    observer.on_near_limit(Transaction{}, RuleStatus{rule, {}, {}, {}, {}, {}, {}});
  }
  CHECK(family(observer.render(), "limitcounter_near_limit_total") ==
        "# HELP limitcounter_near_limit_total Allowed transactions that left a window of the rule "
        "near its limit.\n"
        "# TYPE limitcounter_near_limit_total counter\n"
        "limitcounter_near_limit_total{rule=\"_other_\"} 2\n"
        "limitcounter_near_limit_total{rule=\"r1\"} 2\n"
        "limitcounter_near_limit_total{rule=\"r2\"} 1\n");
}

TEST_CASE("PrometheusObserver counts every event of concurrent threads", "[prometheus]") {
  PrometheusObserver observer;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&observer, t] {
      for (int i = 0; i < 1000; ++i) {
        observer.on_limiter_decision(LimiterKind::sliding_window, "l" + std::to_string(i % 3),
                                     (i + t) % 2 == 0, 1ms);
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  CHECK_THAT(observer.render(),
             Catch::Contains("limitcounter_limiter_decision_seconds_count{kind=\"sliding_window\"} "
                             "4000\n"));
}

TEST_CASE("PrometheusObserver renders transitions, wallet, red packet and payout operations by op "
          "and status",
          "[prometheus]") {
  using limitcounter::PayoutOp;
  using limitcounter::RedPacketOp;
  using limitcounter::WalletOp;
  PrometheusObserver observer;
  observer.on_transition(limitcounter::LimitOp::refund, "refunded", 1ms);
  observer.on_transition(limitcounter::LimitOp::confirm, "error", 1ms);
  observer.on_wallet_operation(WalletOp::deduct, "ok", 1ms);
  observer.on_wallet_operation(WalletOp::deduct, "insufficient", 2ms);
  observer.on_wallet_operation(WalletOp::deduct, "ok", 1ms);
  observer.on_wallet_operation(WalletOp::freeze, "changed", 1ms);
  observer.on_red_packet_operation(RedPacketOp::grab, "sold_out", 1ms);
  observer.on_payout_operation(PayoutOp::take, "ok", 3, 1ms);
  observer.on_payout_operation(PayoutOp::take, "ok", 0, 1ms);
  observer.on_payout_operation(PayoutOp::fail, "dead_lettered", 1, 1ms);

  const std::string text = observer.render();
  CHECK(family(text, "limitcounter_wallet_operations_total") ==
        "# HELP limitcounter_wallet_operations_total Wallet deductions, credits, rollbacks, "
        "freezes and unfreezes.\n"
        "# TYPE limitcounter_wallet_operations_total counter\n"
        "limitcounter_wallet_operations_total{op=\"deduct\",status=\"insufficient\"} 1\n"
        "limitcounter_wallet_operations_total{op=\"deduct\",status=\"ok\"} 2\n"
        "limitcounter_wallet_operations_total{op=\"freeze\",status=\"changed\"} 1\n");
  CHECK(family(text, "limitcounter_transitions_total") ==
        "# HELP limitcounter_transitions_total Confirms, cancels and refunds of transactions.\n"
        "# TYPE limitcounter_transitions_total counter\n"
        "limitcounter_transitions_total{op=\"confirm\",status=\"error\"} 1\n"
        "limitcounter_transitions_total{op=\"refund\",status=\"refunded\"} 1\n");
  CHECK_THAT(text,
             Catch::Contains("\nlimitcounter_wallet_operation_seconds_sum{op=\"deduct\"} 0.004\n"));
  CHECK_THAT(text, Catch::Contains("\nlimitcounter_red_packet_operations_total{op=\"grab\","
                                   "status=\"sold_out\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("\nlimitcounter_payout_operations_total{op=\"take\","
                                   "status=\"ok\"} 2\n"));
  CHECK_THAT(text, Catch::Contains("\nlimitcounter_payout_operations_total{op=\"fail\","
                                   "status=\"dead_lettered\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("\nlimitcounter_payout_tasks_taken_total 3\n"));
  CHECK_THAT(text, Catch::Contains("\nlimitcounter_payout_operation_seconds_count{op=\"take\"} "
                                   "2\n"));
}

TEST_CASE("PrometheusObserver keeps the last journal lag per group and partition as gauges",
          "[prometheus]") {
  using limitcounter::JournalLag;
  PrometheusObserver observer;
  observer.on_journal_lag(JournalLag{"persister", 3, 7, 2});
  observer.on_journal_lag(JournalLag{"persister", 10, 0, 0});
  observer.on_journal_lag(JournalLag{"persister", 3, 4, 1}); // replaces the first
  observer.on_journal_lag(JournalLag{"audit", 3, std::nullopt, 5});

  const std::string text = observer.render();
  CHECK(family(text, "limitcounter_journal_lag_entries") ==
        "# HELP limitcounter_journal_lag_entries Wallet journal events not yet read by the "
        "consumer group.\n"
        "# TYPE limitcounter_journal_lag_entries gauge\n"
        "limitcounter_journal_lag_entries{group=\"audit\",partition=\"3\"} NaN\n"
        "limitcounter_journal_lag_entries{group=\"persister\",partition=\"10\"} 0\n"
        "limitcounter_journal_lag_entries{group=\"persister\",partition=\"3\"} 4\n");
  CHECK(family(text, "limitcounter_journal_pending_entries") ==
        "# HELP limitcounter_journal_pending_entries Wallet journal events read by the consumer "
        "group, not acknowledged.\n"
        "# TYPE limitcounter_journal_pending_entries gauge\n"
        "limitcounter_journal_pending_entries{group=\"audit\",partition=\"3\"} 5\n"
        "limitcounter_journal_pending_entries{group=\"persister\",partition=\"10\"} 0\n"
        "limitcounter_journal_pending_entries{group=\"persister\",partition=\"3\"} 1\n");
}
