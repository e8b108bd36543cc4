// The pure parts of Redis Sentinel support: reading the sentinels' and the servers' replies,
// which failures make the library ask the sentinels again, and when it asks them.
#include <catch2/catch.hpp>

#include <limitcounter/error.hpp>

#include "redis/sentinel.hpp"
#include "redis/sentinel_master.hpp"

using limitcounter::errc;
using limitcounter::Error;
using limitcounter::Outcome;
using limitcounter::Reply;
using namespace limitcounter::detail;

TEST_CASE("GET-MASTER-ADDR-BY-NAME replies give the master's address", "[sentinel]") {
  const auto address =
      parse_master_addr(Reply::array({Reply::string("10.0.0.7"), Reply::string("6380")}));
  REQUIRE(address);
  CHECK(address->host == "10.0.0.7");
  CHECK(address->port == 6380);
  // nil: the sentinel does not monitor a master of that name
  CHECK_FALSE(parse_master_addr(Reply()));

  const std::vector<Reply> malformed{
      Reply::error("ERR unknown command 'SENTINEL'"), // a data server, not a sentinel
      Reply::array({Reply::string("10.0.0.7")}),
      Reply::array({Reply::string("10.0.0.7"), Reply::integer(6380)}),
      Reply::array({Reply::string("10.0.0.7"), Reply::string("0")}),
      Reply::array({Reply::string("10.0.0.7"), Reply::string("65536")}),
      Reply::array({Reply::string("10.0.0.7"), Reply::string("63a")}),
      Reply::array({Reply::string(""), Reply::string("6380")}),
      Reply::string("10.0.0.7:6380"),
  };
  for (const Reply& reply : malformed) {
    INFO(reply.debug_string());
    try {
      parse_master_addr(reply);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.code() == errc::protocol_error);
      CHECK_THAT(e.what(), Catch::Contains("GET-MASTER-ADDR-BY-NAME"));
    }
  }
}

TEST_CASE("ROLE replies say whether a server is the master", "[sentinel]") {
  const Reply master =
      Reply::array({Reply::string("master"), Reply::integer(1234), Reply::array({})});
  const Reply replica =
      Reply::array({Reply::string("slave"), Reply::string("127.0.0.1"), Reply::integer(6380),
                    Reply::string("connected"), Reply::integer(1234)});
  CHECK(role_is_master(master));
  CHECK_FALSE(role_is_master(replica));
  CHECK(role_name(replica) == "slave");
  CHECK_FALSE(role_is_master(Reply::error("NOPERM this user has no permissions")));
  CHECK_FALSE(role_is_master(Reply::array({})));
}

TEST_CASE("a demoted master's READONLY and a lost master make the library ask the sentinels",
          "[sentinel]") {
  // READONLY, from a plain write and from a write inside a script (Redis 7 keeps the code)
  CHECK(is_readonly_reply(Reply::error("READONLY You can't write against a read only replica.")));
  CHECK(is_readonly_reply(
      Reply::error("READONLY You can't write against a read only replica. script: 41d08d75, on "
                   "@user_script:1.")));
  CHECK_FALSE(is_readonly_reply(Reply::error("ERR READONLY is not a command")));
  CHECK_FALSE(is_readonly_reply(Reply::error("READONLYX")));
  CHECK_FALSE(is_readonly_reply(Reply::string("READONLY You can't")));
  CHECK_FALSE(is_readonly_reply(Reply::error("LOADING Redis is loading the dataset in memory")));

  CHECK(calls_for_rediscovery(Error(errc::connect_failed, "refused")));
  CHECK(calls_for_rediscovery(Error(errc::io_error, "reset", Outcome::unknown)));
  CHECK(calls_for_rediscovery(Error(errc::timeout, "no answer", Outcome::unknown)));
  CHECK_FALSE(calls_for_rediscovery(Error(errc::pool_exhausted, "busy")));
  CHECK_FALSE(calls_for_rediscovery(Error(errc::server_error, "ERR", Outcome::failed)));
  CHECK_FALSE(calls_for_rediscovery(Error(errc::invalid_argument, "bad")));
  CHECK_FALSE(calls_for_rediscovery(Error(errc::circuit_open, "open")));
}

TEST_CASE("the sentinels are asked on the first call, then at most once per sentinel_recheck",
          "[sentinel]") {
  using std::chrono::milliseconds;
  const milliseconds recheck(1000);
  // the first call: no master yet, whatever the clock says
  CHECK(rediscovery_step(false, true, milliseconds(0), recheck) == Rediscovery::ask);
  // a failure on the master in use: asked again once the last answer is recheck old
  CHECK(rediscovery_step(true, true, milliseconds(999), recheck) == Rediscovery::too_soon);
  CHECK(rediscovery_step(true, true, milliseconds(1000), recheck) == Rediscovery::ask);
  CHECK(rediscovery_step(true, true, milliseconds(0), milliseconds(0)) == Rediscovery::ask);
  // a failure on a master another call has left already: sent to the new one, nobody asked
  CHECK(rediscovery_step(true, false, milliseconds(0), recheck) == Rediscovery::moved_already);
  CHECK(rediscovery_step(true, false, milliseconds(5000), recheck) == Rediscovery::moved_already);
}
