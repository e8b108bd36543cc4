#include "limit_counter/codec/record_text.hpp"

#include <algorithm>
#include <array>

#include <limitcounter/error.hpp>
#include <limitcounter/reply.hpp>

#include "limit_counter/codec/common.hpp"

namespace limitcounter::detail {

namespace {

constexpr std::array<Metric, 4> metrics{Metric::count, Metric::amount, Metric::single_amount,
                                        Metric::unavailable};

} // namespace

Denial decode_denial(std::string_view text, std::string_view transaction_id,
                     std::int64_t requested_amount) {
  const auto words = split(text, ' ');
  const auto metric = words.size() == 4
                          ? std::find_if(metrics.begin(), metrics.end(),
                                         [&](Metric m) { return to_string(m) == words[1]; })
                          : metrics.end();
  if (metric == metrics.end()) {
    throw Error(errc::protocol_error,
                "the recorded denial of " + quoted_id(transaction_id) + " is not one: \"" +
                    std::string(text) + "\"",
                Outcome::unknown);
  }
  const auto number = [](std::string_view word) {
    return Reply::string(std::string(word)).to_int64();
  };
  return Denial{std::string(words[0]), *metric, number(words[2]), number(words[3]),
                *metric == Metric::count ? 1 : requested_amount};
}

std::string encode_stored_decision(const Decision& decision) {
  if (!decision.denial) {
    return {};
  }
  const Denial& denial = *decision.denial;
  std::string text = denial.rule;
  text.append(1, ' ')
      .append(to_string(denial.metric))
      .append(1, ' ')
      .append(std::to_string(denial.limit))
      .append(1, ' ')
      .append(std::to_string(denial.used));
  return text;
}

Decision decode_stored_decision(TransactionState state, std::string_view denial,
                                std::string_view transaction_id, std::int64_t amount) {
  Decision decision;
  decision.state = state;
  if (state == TransactionState::denied) {
    decision.verdict = Decision::Verdict::denied;
    decision.denial = decode_denial(denial, transaction_id, amount);
  } else if (state == TransactionState::voided) {
    decision.verdict = Decision::Verdict::cancelled;
  }
  return decision;
}

} // namespace limitcounter::detail
