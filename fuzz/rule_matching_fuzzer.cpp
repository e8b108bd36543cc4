// Rule matching: for any rules and transaction, validation either accepts or throws
// limitcounter::Error, and the applicable rules all hold for the transaction with no
// two of one shape and period at different specificity.
#include <cstdlib>

#include <limitcounter/error.hpp>

#include "limit_counter/rule_matching.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace limitcounter;
  fuzz::Input input(data, size);
  static const char* const attributes[] = {"merchant", "dept", "channel"};
  static const char* const values[] = {"*", "a", "b"};
  RuleSet rules({"merchant", "dept", "channel"});
  const int rule_count = input.take_byte() % 6;
  for (int i = 0; i < rule_count; ++i) {
    Rule rule("r" + std::to_string(i));
    const int conditions = input.take_byte() % 3;
    for (int c = 0; c < conditions; ++c) {
      rule.where(attributes[input.take_byte() % 3], values[input.take_byte() % 3]);
    }
    if (input.take_byte() % 4 == 0) {
      rule.per_transaction();
    } else {
      rule.per(static_cast<Period>(input.take_byte() % 6));
    }
    if (input.take_byte() % 2 != 0) {
      rule.max_count(input.take_int64());
    }
    if (input.take_byte() % 2 != 0) {
      rule.max_amount(input.take_int64());
    }
    try {
      rules.add(std::move(rule));
    } catch (const Error&) {
    }
  }
  Transaction tx;
  tx.id = input.take_string();
  for (const char* attribute : attributes) {
    if (input.take_byte() % 4 != 0) {
      tx.attributes[attribute] = input.take_string();
    }
  }
  try {
    detail::validate_transaction(rules, tx);
  } catch (const Error&) {
    return 0;
  }
  const auto matched = detail::match_rules(rules, tx);
  for (const auto* list : {&matched.window, &matched.per_transaction}) {
    for (const Rule* rule : *list) {
      for (const auto& condition : rule->conditions()) {
        if (!condition.is_wildcard() && tx.attributes.at(condition.attribute) != condition.value) {
          std::abort();
        }
      }
    }
  }
  return 0;
}
