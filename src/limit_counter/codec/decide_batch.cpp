#include "limit_counter/codec/decide_batch.hpp"

#include <iterator>

#include "limit_counter/codec/decide_arguments.hpp"
#include "shared/msgpack.hpp"

namespace limitcounter::detail {

void DecideBatch::add(std::vector<std::string>&& keys, std::vector<std::string>&& args) {
  using at = DecideLayout;
  // The header (now, record expiry, hold expiry) of the latest call: a consume queued behind
  // others is decided at its own time or later, never at an older caller's (a hold that expired
  // before it was made must not deny it; its record keeps at least its own replay horizon).
  const auto later = [](const std::string& a, const std::string& b) { // decimal, no sign
    return a.size() != b.size() ? a.size() > b.size() : a > b;
  };
  if (size_ == 0 || later(args[2], header_[0])) {
    header_.assign(std::make_move_iterator(args.begin() + 2),
                   std::make_move_iterator(args.begin() + at::program - 1));
  }
  // Transactions that matched the same rules share one program ...
  std::size_t program = 0;
  while (program < programs_.size() && !(programs_[program].first == args[at::program] &&
                                         programs_[program].second == args[at::program + 1])) {
    ++program;
  }
  if (program == programs_.size()) {
    programs_.emplace_back(std::move(args[at::program]), std::move(args[at::program + 1]));
  }
  // ... and those that move the same counters one counter set: its text names every
  // counter's key, its name is the text's digest.
  const std::string& name = args[at::set + 1];
  const std::string& text = args[at::set + 2];
  std::size_t set = 0;
  while (set < sets_.size() &&
         !(sets_[set].program == program && sets_[set].name == name && sets_[set].text == text)) {
    ++set;
  }
  if (set == sets_.size()) {
    CounterSet& added = sets_.emplace_back();
    added.program = program;
    added.name = std::move(args[at::set + 1]);
    added.text = std::move(args[at::set + 2]);
    // KEYS: the record, then the set's key, its counters' keys and its hold sets
    added.keys.assign(std::make_move_iterator(keys.begin() + 1),
                      std::make_move_iterator(keys.end()));
  }
  transaction_sets_.push_back(set);
  for (std::size_t i = 0; i < 3; ++i) { // fingerprint, amount, fields
    transactions_.push_back(std::move(args[at::transaction + i]));
  }
  records_.push_back(std::move(keys.front()));
  ++size_;
}

std::pair<std::vector<std::string>, std::vector<std::string>> DecideBatch::take() {
  std::vector<std::string> args{"batch", std::to_string(size_)};
  args.insert(args.end(), header_.begin(), header_.end());
  args.push_back(std::to_string(programs_.size()));
  for (auto& [numbers, names] : programs_) {
    args.push_back(std::move(numbers));
    args.push_back(std::move(names));
  }
  args.push_back(std::to_string(sets_.size()));
  std::vector<std::string> keys = std::move(records_);
  for (auto& set : sets_) {
    args.push_back(std::to_string(set.program + 1));
    args.push_back(std::move(set.name));
    args.push_back(std::move(set.text));
    keys.insert(keys.end(), std::make_move_iterator(set.keys.begin()),
                std::make_move_iterator(set.keys.end()));
  }
  // The transactions' values as one MessagePack array of strings: one argument instead of 3 (or
  // 4) per transaction, each of which Redis would parse and make an object of (~1,000 of its
  // instructions per transaction, measured; docs/BENCHMARKS.md).
  const bool several_sets = sets_.size() > 1;
  // (a string's head takes 1 byte up to 31 characters, 2 up to 255; a longer one may regrow it)
  std::size_t bytes = 5 + (several_sets ? 2 * size_ : 0);
  for (const std::string& value : transactions_) {
    bytes += 2 + value.size();
  }
  std::string packed;
  packed.reserve(bytes);
  append_msgpack_array(packed, transactions_.size() + (several_sets ? size_ : 0));
  for (std::size_t i = 0; i < size_; ++i) {
    if (several_sets) {
      append_msgpack_string(packed, std::to_string(transaction_sets_[i] + 1));
    }
    for (std::size_t j = 3 * i; j < 3 * i + 3; ++j) {
      append_msgpack_string(packed, transactions_[j]);
    }
  }
  args.push_back(std::move(packed));
  *this = DecideBatch();
  return {std::move(keys), std::move(args)};
}

} // namespace limitcounter::detail
