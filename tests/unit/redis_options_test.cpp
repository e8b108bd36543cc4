#include <catch2/catch.hpp>

#include <limitcounter/error.hpp>
#include <limitcounter/redis.hpp>

using limitcounter::errc;
using limitcounter::Error;
using limitcounter::RedisOptions;

TEST_CASE("Redis URIs parse into options", "[uri]") {
  auto o = RedisOptions::from_uri("redis://10.0.0.5:7000/3");
  CHECK(o.host == "10.0.0.5");
  CHECK(o.port == 7000);
  CHECK(o.db == 3);
  CHECK(o.user.empty());
  CHECK(o.password.empty());

  o = RedisOptions::from_uri("redis://limits:p%40ss%3Aword@cache.local:6380");
  CHECK(o.user == "limits");
  CHECK(o.password == "p@ss:word");
  CHECK(o.host == "cache.local");
  CHECK(o.port == 6380);
  CHECK(o.db == 0);

  o = RedisOptions::from_uri("redis://:secret@localhost");
  CHECK(o.user.empty());
  CHECK(o.password == "secret");
  CHECK(o.port == 6379);

  o = RedisOptions::from_uri("redis://[::1]:6390");
  CHECK(o.host == "::1");
  CHECK(o.port == 6390);

  o = RedisOptions::from_uri("unix:///var/run/redis/redis.sock?db=2");
  CHECK(o.unix_socket == "/var/run/redis/redis.sock");
  CHECK(o.db == 2);

  o = RedisOptions::from_uri("redis-cluster://u:pw@127.0.0.1:7000,127.0.0.1:7001,[::1]:7002");
  CHECK(o.cluster_seeds ==
        std::vector<std::string>{"127.0.0.1:7000", "127.0.0.1:7001", "[::1]:7002"});
  CHECK(o.user == "u");
  CHECK(o.password == "pw");
}

TEST_CASE("bad Redis URIs name the bad part and never the password", "[uri]") {
  const std::vector<std::pair<std::string, std::string>> bad{
      {"127.0.0.1:6379", "missing scheme"},
      {"http://x:1", "unsupported scheme \"http\""},
      {"redis://host:0", "port \"0\""},
      {"redis://host:65536", "port \"65536\""},
      {"redis://host:12ab", "port \"12ab\""},
      {"redis://host:6379/x", "db \"x\""},
      {"redis://:6379", "host is missing"},
      {"redis://[::1:6379", "without ']'"},
      {"unix://relative.sock", "not absolute"},
      {"unix:///tmp/r.sock?timeout=1", "unknown query"},
      {"redis-cluster://", "at least one host:port"},
      {"redis-cluster://h:1/2", "no database"},
      {"redis://u:Hunter%zz@h:1", "percent-encoding in the password"},
  };
  for (const auto& [uri, needle] : bad) {
    INFO(uri);
    try {
      RedisOptions::from_uri(uri);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.code() == errc::invalid_argument);
      CHECK_THAT(e.what(), Catch::Contains(needle));
      CHECK_THAT(e.what(), !Catch::Contains("Hunter"));
    }
  }
}
