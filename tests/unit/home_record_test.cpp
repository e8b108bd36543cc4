// The cluster home record as the client writes and reads it (lua/transaction_home.lua).
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include <limitcounter/error.hpp>

#include "limit_counter/codec/record_text.hpp"
#include "limit_counter/home_record.hpp"

using limitcounter::Decision;
using limitcounter::Denial;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::Metric;
using limitcounter::TransactionState;
using namespace limitcounter::detail;

TEST_CASE("a home record's one-letter fields read under a share record's names", "[unit][home]") {
  std::map<std::string, std::string> reserved{
      {"f", "AAAAAAAAAAA:250"}, {"p", "dept\nmerchant"}, {"s", "r"}, {"h", "1700000000000"}};
  name_home_fields(reserved);
  CHECK(reserved["state"] == "reserved");
  CHECK(reserved["amount"] == "250"); // the fingerprint's
  CHECK(reserved["refunded"] == "0");
  CHECK(reserved["hexp"] == "1700000000000");

  std::map<std::string, std::string> confirmed{
      {"f", "AAAAAAAAAAA:250"}, {"p", "dept"}, {"s", "f"}, {"a", "60"}, {"r", "10"}};
  name_home_fields(confirmed);
  CHECK(confirmed["state"] == "confirmed");
  CHECK(confirmed["amount"] == "60"); // the confirmed one
  CHECK(confirmed["refunded"] == "10");
  CHECK(confirmed.count("hexp") == 0);

  for (const auto& [letter, state] : std::map<std::string, std::string>{{"p", "pending"},
                                                                        {"c", "consumed"},
                                                                        {"d", "denied"},
                                                                        {"x", "cancelled"},
                                                                        {"e", "expired"},
                                                                        {"v", "voided"}}) {
    std::map<std::string, std::string> fields{{"f", "AAAAAAAAAAA:1"}, {"s", letter}};
    name_home_fields(fields);
    CHECK(fields["state"] == state);
  }
}

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
