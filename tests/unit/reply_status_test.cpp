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
using limitcounter::detail::reply_status;
using limitcounter::detail::ReplyStatus;

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

Reply reply_of(std::string word) {
  return Reply::array({Reply::string(std::move(word)), Reply::string("reserved")});
}

} // namespace

TEST_CASE("every status the limit scripts' contracts name is read, and written back the same",
          "[unit][codec]") {
  std::set<std::string> statuses = contract_statuses(limitcounter::scripts::limit.source);
  const std::set<std::string> home =
      contract_statuses(limitcounter::scripts::transaction_home.source);
  statuses.insert(home.begin(), home.end());
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
