// Holds Redis, standalone and a Redis Cluster alike, to every row of the limits transaction's
// state machine (src/limit_counter/transition_table.hpp): each row's transaction is put in its
// state through the public API, the operation applied, and the answer and the state that follows
// compared with the row.
#include <catch2/catch.hpp>

#include <thread>

#include <limitcounter/limit_counter.hpp>

#include "limit_counter/transition_table.hpp"
#include "support/redis_server.hpp"
#include "support/topology.hpp"

using namespace std::chrono_literals;
using namespace limitcounter;
using namespace limitcounter::detail;

namespace {

constexpr std::chrono::milliseconds short_hold = 300ms;

struct TransitionsFixture {
  TransitionsFixture() {
    // Two counter shapes: on a cluster each transaction is a home record and two shares.
    const RuleSet rules =
        RuleSet()
            .add(Rule("merchant-day").where("merchant").per(Period::day).max_amount(1000))
            .add(Rule("dept-day").where("dept").per(Period::day).max_amount(1000));
    limits.set_rules(rules);
    short_limits.set_rules(rules);
  }

  Redis redis{testing::test_options()};
  std::string prefix = testing::unique_prefix() + "transitions:";
  LimitCounter limits{redis, Calendar("Asia/Shanghai"), options(15min)};
  // Same keys, holds that run out while the test waits (the `expired` rows).
  LimitCounter short_limits{redis, Calendar("Asia/Shanghai"), options(short_hold)};
  // Days ahead: the windows are open and their keys get real TTLs.
  TimePoint at = Clock::now() + std::chrono::hours{24 * 40};

  LimitCounterOptions options(std::chrono::milliseconds reservation_timeout) const {
    LimitCounterOptions o;
    o.key_prefix = prefix;
    o.reservation_timeout = reservation_timeout;
    o.cluster_hold_grace = 0ms; // on a cluster the shares' holds run out with the home's
    o.max_future_skew.reset();
    return o;
  }

  // Row `i`'s transaction, in counters of its own (no row's amount can deny another's).
  Transaction tx(std::size_t i, std::int64_t amount) const {
    const std::string n = std::to_string(i);
    return Transaction{"tx-" + n, {{"merchant", "m" + n}, {"dept", "d" + n}}, amount, at};
  }

  // The state the records say the transaction is in, as the table names it; a record's own
  // word when the table has no name for it (voided, pending).
  std::string observed(const std::string& id) {
    const auto record = limits.transaction_record(id);
    if (!record) {
      return "none";
    }
    const bool refunded_in_full = record->amount > 0 && record->refunded == record->amount;
    if (record->state == TransactionState::reserved && record->hold_expires &&
        *record->hold_expires <= Clock::now()) {
      return "expired"; // the hold ran out; the record learns it at the next operation
    }
    const std::string state(to_string(record->state));
    if (refunded_in_full && (record->state == TransactionState::consumed ||
                             record->state == TransactionState::confirmed)) {
      return "refunded_" + state;
    }
    return state;
  }

  // Puts row `i`'s transaction in `state` (a reservation to expire with the short hold).
  Transaction enter(std::size_t i, TxState state, bool hold_runs_out) {
    Transaction t = tx(i, state == TxState::denied ? 5000 : 100);
    LimitCounter& reserver = hold_runs_out ? short_limits : limits;
    switch (state) {
    case TxState::none: break;
    case TxState::consumed: REQUIRE(limits.consume(t).allowed()); break;
    case TxState::denied: REQUIRE(limits.consume(t).verdict == Decision::Verdict::denied); break;
    case TxState::refunded_consumed:
      REQUIRE(limits.consume(t).allowed());
      limits.refund(t.id);
      break;
    case TxState::reserved:
    case TxState::expired: REQUIRE(reserver.reserve(t).allowed()); break;
    case TxState::confirmed:
    case TxState::refunded_confirmed:
      REQUIRE(limits.reserve(t).allowed());
      limits.confirm(t.id);
      if (state == TxState::refunded_confirmed) {
        limits.refund(t.id);
      }
      break;
    case TxState::cancelled:
      REQUIRE(limits.reserve(t).allowed());
      limits.cancel(t.id);
      break;
    case TxState::tombstone: limits.cancel(t.id); break;
    }
    return t;
  }

  Answer apply(TxOperation operation, const Transaction& t) {
    try {
      switch (operation) {
      case TxOperation::consume: return answer_of(limits.consume(t));
      case TxOperation::reserve: return answer_of(limits.reserve(t));
      case TxOperation::confirm:
        return limits.confirm(t.id).replayed ? Answer::confirm_replayed : Answer::confirmed;
      case TxOperation::cancel: {
        const CancelResult result = limits.cancel(t.id);
        switch (result.status) {
        case CancelResult::Status::cancelled:
          return result.replayed ? Answer::cancel_replayed : Answer::cancelled;
        case CancelResult::Status::expired: return Answer::cancel_expired;
        case CancelResult::Status::recorded_unknown: return Answer::recorded_unknown;
        }
        break;
      }
      case TxOperation::refund_full:
        return limits.refund(t.id).replayed ? Answer::refund_replayed : Answer::refunded;
      case TxOperation::expire: return Answer::silent;
      }
    } catch (const Error& e) {
      if (e.code() == errc::conflict) {
        return Answer::error_conflict;
      }
      if (e.code() == errc::not_found) {
        return Answer::error_not_found;
      }
      throw;
    }
    FAIL("an answer the table has no name for");
    return Answer::silent;
  }

  static Answer answer_of(const Decision& decision) {
    switch (decision.verdict) {
    case Decision::Verdict::allowed:
      return decision.replayed ? Answer::replayed_allowed : Answer::allowed;
    case Decision::Verdict::denied:
      return decision.replayed ? Answer::replayed_denied : Answer::denied;
    case Decision::Verdict::cancelled: return Answer::refused_cancelled;
    }
    return Answer::silent;
  }
};

std::string row_name(std::size_t i) {
  const auto& row = transition_rows[i];
  return std::string(to_string(row.from)) + " + " + std::string(to_string(row.operation));
}

} // namespace

TEST_CASE_METHOD(TransitionsFixture,
                 "every state and operation answers and moves as the transition table says",
                 "[transitions][redis]") {
  std::vector<Transaction> transactions;
  for (std::size_t i = 0; i < transition_rows.size(); ++i) {
    const auto& row = transition_rows[i];
    const bool hold_runs_out =
        row.from == TxState::expired ||
        (row.from == TxState::reserved && row.operation == TxOperation::expire);
    transactions.push_back(enter(i, row.from, hold_runs_out));
    if (row.from != TxState::expired) {
      INFO(row_name(i) << ": the state entered");
      CHECK(observed(transactions[i].id) == to_string(row.from));
    }
  }
  if (testing::on_cluster()) {
    // the consumed row's transaction: its home record and a share per counter shape
    const auto record = limits.transaction_record(transactions.at(6).id);
    REQUIRE(record);
    CHECK(record->records.size() == 3);
  }
  std::this_thread::sleep_for(short_hold + 100ms); // every short hold runs out
  for (std::size_t i = 0; i < transition_rows.size(); ++i) {
    const auto& row = transition_rows[i];
    const Transaction& t = transactions[i];
    INFO(row_name(i) << " (" << t.id << ")");
    if (row.from == TxState::expired) {
      CHECK(observed(t.id) == "expired");
    }
    const auto expected = transition(row.from, row.operation);
    CHECK(to_string(apply(row.operation, t)) == to_string(expected.answer));
    CHECK(observed(t.id) == to_string(expected.next));
  }
}
