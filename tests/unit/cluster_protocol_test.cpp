#include <catch2/catch.hpp>

#include <limitcounter/error.hpp>

#include "redis/cluster_protocol.hpp"

using limitcounter::Reply;
using namespace limitcounter::detail;

TEST_CASE("CLUSTER SLOTS replies give the masters' ranges", "[cluster]") {
  const Reply reply = Reply::array({
      Reply::array(
          {Reply::integer(0), Reply::integer(5460),
           Reply::array({Reply::string("127.0.0.1"), Reply::integer(7000), Reply::string("id1")}),
           Reply::array({Reply::string("127.0.0.1"), Reply::integer(7003), Reply::string("id4")})}),
      Reply::array(
          {Reply::integer(5461), Reply::integer(16383),
           Reply::array({Reply::string("10.0.0.2"), Reply::integer(7001), Reply::string("id2")})}),
  });
  const auto ranges = parse_cluster_slots(reply, "10.9.9.9");
  REQUIRE(ranges.size() == 2);
  CHECK(ranges[0].first == 0);
  CHECK(ranges[0].last == 5460);
  CHECK(ranges[0].port == 7000);
  CHECK(ranges[1].host == "10.0.0.2");
  CHECK_THROWS_AS(
      parse_cluster_slots(
          Reply::array({Reply::array({Reply::integer(5), Reply::integer(2),
                                      Reply::array({Reply::string("h"), Reply::integer(1)})})}),
          "h"),
      limitcounter::Error);
}

TEST_CASE("a CLUSTER SLOTS master with an empty host is the node that was asked", "[cluster]") {
  // a node that never met another does not know its own IP and answers an empty endpoint
  const Reply reply = Reply::array({Reply::array(
      {Reply::integer(0), Reply::integer(16383),
       Reply::array({Reply::string(""), Reply::integer(7000), Reply::string("id1")})})});
  const auto ranges = parse_cluster_slots(reply, "127.0.0.1");
  REQUIRE(ranges.size() == 1);
  CHECK(ranges[0].host == "127.0.0.1");
  CHECK(ranges[0].port == 7000);
}

TEST_CASE("MOVED and ASK redirections parse; other errors do not", "[cluster]") {
  const auto moved = parse_redirect("MOVED 3999 127.0.0.1:6381");
  REQUIRE(moved);
  CHECK_FALSE(moved->ask);
  CHECK(moved->slot == 3999);
  CHECK(moved->host == "127.0.0.1");
  CHECK(moved->port == 6381);
  const auto ask = parse_redirect("ASK 12182 ::1:7002");
  REQUIRE(ask);
  CHECK(ask->ask);
  CHECK(ask->host == "::1");
  CHECK(ask->port == 7002);
  CHECK_FALSE(parse_redirect("ERR something"));
  CHECK_FALSE(parse_redirect("MOVED x 127.0.0.1:1"));
  CHECK_FALSE(parse_redirect("MOVED 99999 127.0.0.1:1"));
}
