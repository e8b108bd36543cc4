// The statuses of lua/limit.lua's and lua/transaction_home.lua's replies, read into an enum.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <string_view>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/error.hpp>
#include <limitcounter/reply.hpp>

#include "limit_counter/codec/reply_status.hpp"

using limitcounter::errc;
using limitcounter::Error;
using limitcounter::Outcome;
using limitcounter::Reply;
using limitcounter::TransactionState;
using limitcounter::detail::reply_status;
using limitcounter::detail::ReplyStatus;
using limitcounter::detail::transaction_state;

namespace {

// The words the contract (the comment lines) of `source` says a reply begins with: each `{"word"`.
std::set<std::string> contract_statuses(std::string_view source) {
  std::set<std::string> found;
  std::size_t line = 0;
  while (line < source.size()) {
    const std::size_t end = std::min(source.find('\n', line), source.size());
    const std::string_view text = source.substr(line, end - line);
    if (text.substr(0, 2) == "--") {
      for (std::size_t at = text.find("{\""); at != std::string_view::npos;
           at = text.find("{\"", at + 2)) {
        const std::size_t close = text.find('"', at + 2);
        if (close != std::string_view::npos) {
          found.emplace(text.substr(at + 2, close - at - 2));
        }
      }
    }
    line = end + 1;
  }
  return found;
}

// The state names `source` writes: the quoted words of its `state_names = {...}` table.
std::set<std::string> script_state_names(std::string_view source) {
  std::set<std::string> found;
  const std::size_t start = source.find("state_names = {");
  const std::size_t end = source.find('}', start);
  for (std::size_t at = source.find('\'', start); at < end; at = source.find('\'', at + 1)) {
    const std::size_t close = source.find('\'', at + 1);
    found.emplace(source.substr(at + 1, close - at - 1));
    at = close;
  }
  return found;
}

// What `read` finds in lua/limit.lua and in lua/transaction_home.lua.
std::set<std::string> in_both_scripts(std::set<std::string> (*read)(std::string_view)) {
  std::set<std::string> found = read(limitcounter::scripts::limit.source);
  const std::set<std::string> home = read(limitcounter::scripts::transaction_home.source);
  found.insert(home.begin(), home.end());
  return found;
}

Reply reply_of(std::string word) {
  return Reply::array({Reply::string(std::move(word)), Reply::string("reserved")});
}

} // namespace

TEST_CASE("every status the limit scripts' contracts name is read, and written back the same",
          "[unit][codec]") {
  const std::set<std::string> statuses = in_both_scripts(contract_statuses);
  REQUIRE(statuses.count("go") == 1); // (the contracts were read)
  REQUIRE(statuses.count("refunded") == 1);
  for (const std::string& word : statuses) {
    INFO(word);
    CHECK(to_string(reply_status(reply_of(word))) == word);
  }
  CHECK(reply_status(reply_of("final")) == ReplyStatus::final_);
  CHECK(reply_status(reply_of("bad_state")) == ReplyStatus::bad_state);
  CHECK(reply_status(Reply::array({Reply::string("missing")})) == ReplyStatus::missing);
}

TEST_CASE("a reply beginning with no status of the limit scripts is a protocol error naming it",
          "[unit][codec]") {
  for (const std::string word : {"gone", "", "Final", "final ", "bad-state"}) {
    INFO(word);
    CHECK_THROWS_MATCHES(
        reply_status(reply_of(word)), Error, Catch::Predicate<Error>([&](const Error& e) {
          return e.code() == errc::protocol_error && e.outcome() == Outcome::unknown &&
                 std::string(e.what()).find("\"" + word + "\"") != std::string::npos;
        }));
  }
  // not a string, or nothing at all
  CHECK_THROWS_AS(reply_status(Reply::array({Reply::integer(1)})), Error);
  CHECK_THROWS_AS(reply_status(Reply::array({})), Error);
}

TEST_CASE("every transaction state is written as its word and read back from it", "[unit][codec]") {
  std::set<std::string_view> words;
  for (auto i = static_cast<int>(TransactionState::none);
       i <= static_cast<int>(TransactionState::tombstone); ++i) {
    const auto state = static_cast<TransactionState>(i);
    INFO(i << " " << to_string(state));
    words.insert(to_string(state));
    CHECK(transaction_state(to_string(state), "a test") == state);
  }
  CHECK(words.size() == 10); // (no word names two states)
  // the words of the string fields they replace, so logs and limitctl's output keep them
  CHECK(words == std::set<std::string_view>{"none", "consumed", "denied", "reserved", "confirmed",
                                            "cancelled", "expired", "voided", "pending",
                                            "tombstone"});
  // every state a script names (limit.lua's records, transaction_home.lua's home record)
  const std::set<std::string> named = in_both_scripts(script_state_names);
  REQUIRE(named.count("voided") == 1); // (the tables were read)
  REQUIRE(named.count("pending") == 1);
  for (const std::string& word : named) {
    INFO(word);
    CHECK(to_string(transaction_state(word, "a script")) == word);
  }
}

TEST_CASE("a word from Redis that names no transaction state is a protocol error naming it",
          "[unit][codec]") {
  for (const std::string word : {"refunded", "", "Consumed", "voided ", "c"}) {
    INFO(word);
    CHECK_THROWS_MATCHES(transaction_state(word, "record tx:{t1}"), Error,
                         Catch::Predicate<Error>([&](const Error& e) {
                           const std::string what = e.what();
                           return e.code() == errc::protocol_error &&
                                  e.outcome() == Outcome::unknown &&
                                  what.find("\"" + word + "\"") != std::string::npos &&
                                  what.find("record tx:{t1}") != std::string::npos;
                         }));
  }
}
