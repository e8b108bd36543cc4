// The router's slot map and seed parsing, without a server.
#include <catch2/catch.hpp>

#include <limitcounter/error.hpp>

#include "redis/router.hpp"

using namespace std::chrono_literals;
using limitcounter::detail::Endpoint;
using limitcounter::detail::parse_seed;
using limitcounter::detail::Redirect;
using limitcounter::detail::SlotMap;

TEST_CASE("cluster seeds parse as host:port or [v6]:port, else Error naming them", "[router]") {
  CHECK(parse_seed("10.0.0.1:7000") == Endpoint{"10.0.0.1", 7000});
  CHECK(parse_seed("[::1]:7001") == Endpoint{"::1", 7001});
  CHECK(parse_seed("node-b:65535") == Endpoint{"node-b", 65535});
  for (const char* bad : {"10.0.0.1", "node:", ":7000", "node:0", "node:65536", "node:7x",
                          "node: 7000", "::1:7000", "[::1]", ""}) {
    try {
      parse_seed(bad);
      FAIL("accepted " << bad);
    } catch (const limitcounter::Error& e) {
      CHECK(e.code() == limitcounter::errc::invalid_argument);
      CHECK_THAT(e.what(), Catch::Contains("\"" + std::string(bad) + "\""));
    }
  }
}

TEST_CASE("the slot map routes by CLUSTER SLOTS and follows MOVED", "[router]") {
  const SlotMap::Clock::time_point t0{};
  SlotMap map;
  const auto seed = map.node_index({"127.0.0.1", 7000});
  CHECK(map.node_index({"127.0.0.1", 7000}) == seed); // stable, not duplicated
  CHECK(map.stale(t0));
  CHECK_FALSE(map.owner(5));
  CHECK_FALSE(map.assign({}, t0)); // an empty reply keeps what is known
  CHECK(map.stale(t0));

  REQUIRE(map.assign({{0, 5460, "127.0.0.1", 7000}, {5461, 16383, "127.0.0.1", 7001}}, t0));
  CHECK(map.node_count() == 2);
  CHECK(map.owner(0) == seed);
  CHECK(map.owner(-1) == seed); // a call without keys goes to slot 0's node
  CHECK(map.node(*map.owner(5461)) == Endpoint{"127.0.0.1", 7001});
  CHECK_FALSE(map.stale(t0 + 29s));
  CHECK(map.stale(t0 + SlotMap::refresh_every));

  // A reply that no longer lists slots 0-99 leaves them with the owner known before.
  REQUIRE(map.assign({{100, 16383, "127.0.0.1", 7001}}, t0));
  CHECK(map.owner(50) == seed);
  CHECK(map.node(*map.owner(100)) == Endpoint{"127.0.0.1", 7001});

  Redirect moved;
  moved.slot = 100;
  moved.host = "127.0.0.1";
  moved.port = 7002;
  const auto third = map.moved(moved);
  CHECK(map.owner(100) == third);
  CHECK(map.owner(99) == seed);
  CHECK(map.stale(t0 + 1s)); // one MOVED means the rest of the map may be stale too
}

TEST_CASE("one slot per node reaches every node that serves a slot once", "[router]") {
  SlotMap map;
  CHECK(map.one_slot_per_node().empty());
  const auto seed = map.node_index({"127.0.0.1", 7000}); // a seed that serves nothing
  REQUIRE(map.assign(
      {{0, 99, "127.0.0.1", 7001}, {100, 199, "127.0.0.1", 7002}, {200, 16383, "127.0.0.1", 7001}},
      SlotMap::Clock::time_point{}));
  const std::vector<int> slots = map.one_slot_per_node();
  REQUIRE(slots == std::vector<int>{0, 100});
  CHECK(map.node(*map.owner(slots[0])) == Endpoint{"127.0.0.1", 7001});
  CHECK(map.node(*map.owner(slots[1])) == Endpoint{"127.0.0.1", 7002});
  CHECK(map.owner(slots[0]) != seed);
}

TEST_CASE("a command is routed by its first key, wherever the command keeps it", "[router]") {
  using limitcounter::detail::routing_key;
  using Argv = std::vector<std::string>;
  CHECK(routing_key(Argv{"GET", "k"}) == "k");
  CHECK(routing_key(Argv{"hget", "h", "f"}) == "h");
  CHECK(routing_key(Argv{"XADD", "s", "*", "f", "v"}) == "s");
  // XREAD's argv[1] is an option: routing by it sent the call to the slot of "BLOCK".
  CHECK(routing_key(Argv{"XREAD", "BLOCK", "1000", "STREAMS", "lc:{r}:history", "0-0"}) ==
        "lc:{r}:history");
  CHECK(routing_key(Argv{"xread", "COUNT", "5", "streams", "s1", "s2", "0", "0"}) == "s1");
  CHECK(routing_key(Argv{"XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"}) == "s");
  CHECK_FALSE(routing_key(Argv{"XREAD", "BLOCK", "10", "STREAMS"}));
  CHECK(routing_key(Argv{"EVAL", "return 1", "2", "a", "b", "x"}) == "a");
  CHECK(routing_key(Argv{"EVALSHA", "abc", "1", "k"}) == "k");
  CHECK_FALSE(routing_key(Argv{"EVAL", "return 1", "0", "arg"}));
  CHECK_FALSE(routing_key(Argv{"EVAL", "return 1", "x", "arg"}));
  CHECK(routing_key(Argv{"MEMORY", "USAGE", "k"}) == "k");
  CHECK(routing_key(Argv{"XINFO", "STREAM", "s"}) == "s");
  CHECK(routing_key(Argv{"XGROUP", "CREATE", "s", "g", "0"}) == "s");
  CHECK_FALSE(routing_key(Argv{"PING"}));
  CHECK_FALSE(routing_key(Argv{"INFO", "commandstats"}));
  CHECK_FALSE(routing_key(Argv{"SCRIPT", "EXISTS", "abc"}));
  CHECK_FALSE(routing_key(Argv{"KEYS", "*"}));
}
