// The decision a cluster home record keeps (lua/transaction_home.lua), as the client writes and
// reads it.
#include <catch2/catch.hpp>

#include <string>

#include <limitcounter/error.hpp>

#include "limit_counter/codec/record_text.hpp"

using limitcounter::Decision;
using limitcounter::Denial;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::Metric;
using limitcounter::TransactionState;
using namespace limitcounter::detail;

TEST_CASE("a home record's decision is its state and denial, no rules", "[unit][home]") {
  Decision denied;
  denied.verdict = Decision::Verdict::denied;
  denied.denial = Denial{"merchant-day", Metric::amount, 1000, 900, 200};
  denied.rules.resize(4); // not stored
  const std::string text = encode_stored_decision(denied);
  CHECK(text == "merchant-day amount 1000 900");
  const Decision back = decode_stored_decision(TransactionState::denied, text, "t1", 200);
  CHECK(back.verdict == Decision::Verdict::denied);
  CHECK(back.state == TransactionState::denied);
  REQUIRE(back.denial);
  CHECK(back.denial->rule == "merchant-day");
  CHECK(back.denial->metric == Metric::amount);
  CHECK(back.denial->limit == 1000);
  CHECK(back.denial->used == 900);
  CHECK(back.denial->requested == 200); // the transaction's amount
  CHECK(back.rules.empty());

  Decision count_denied = denied;
  count_denied.denial = Denial{"dept-day", Metric::count, 3, 3, 1};
  CHECK(decode_stored_decision(TransactionState::denied, encode_stored_decision(count_denied), "t1",
                               200)
            .denial->requested == 1);

  Decision allowed;
  allowed.rules.resize(2);
  CHECK(encode_stored_decision(allowed).empty());
  for (const TransactionState state :
       {TransactionState::consumed, TransactionState::reserved, TransactionState::confirmed,
        TransactionState::cancelled, TransactionState::expired}) {
    const Decision decoded = decode_stored_decision(state, "", "t1", 5);
    CHECK(decoded.allowed());
    CHECK(decoded.state == state);
    CHECK_FALSE(decoded.denial);
  }
  // abandoned by the sweep before anyone learnt its decision
  CHECK(decode_stored_decision(TransactionState::voided, "", "t1", 5).verdict ==
        Decision::Verdict::cancelled);

  try {
    decode_stored_decision(TransactionState::denied, "merchant-day amount", "t-bad", 5);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == errc::protocol_error);
    CHECK_THAT(e.what(), Catch::Contains("t-bad"));
  }
}
