#include <catch2/catch.hpp>

#include <limitcounter/error.hpp>
#include <limitcounter/redis.hpp>

using namespace std::chrono_literals;
using limitcounter::Redis;

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

TEST_CASE("rediss:// turns TLS on; its query sets the TLS files, server name and verification",
          "[uri][tls]") {
  auto o = RedisOptions::from_uri("redis://h:1");
  CHECK_FALSE(o.tls.enabled);

  o = RedisOptions::from_uri("rediss://u:p%3Fw@cache.example:6380/2");
  CHECK(o.tls.enabled);
  CHECK(o.tls.verify_peer);
  CHECK(o.tls.ca_file.empty());
  CHECK(o.password == "p?w");
  CHECK(o.host == "cache.example");
  CHECK(o.port == 6380);
  CHECK(o.db == 2);

  o = RedisOptions::from_uri("rediss://:pw@10.0.0.5:6380/1?ca_file=/etc/r/ca.pem&ca_dir=/etc/r/"
                             "cas&cert_file=/etc/r/c%40t.pem&key_file=/etc/r/k.pem&server_name="
                             "redis.internal&verify_peer=no");
  CHECK(o.tls.enabled);
  CHECK(o.host == "10.0.0.5");
  CHECK(o.db == 1);
  CHECK(o.tls.ca_file == "/etc/r/ca.pem");
  CHECK(o.tls.ca_dir == "/etc/r/cas");
  CHECK(o.tls.cert_file == "/etc/r/c@t.pem");
  CHECK(o.tls.key_file == "/etc/r/k.pem");
  CHECK(o.tls.server_name == "redis.internal");
  CHECK_FALSE(o.tls.verify_peer);

  o = RedisOptions::from_uri("rediss-cluster://h1:7000,h2:7001?ca_file=/ca.pem");
  CHECK(o.tls.enabled);
  CHECK(o.cluster_seeds == std::vector<std::string>{"h1:7000", "h2:7001"});
  CHECK(o.tls.ca_file == "/ca.pem");
}

TEST_CASE("TLS files are checked when Redis is constructed, naming the path", "[uri][tls]") {
  const std::vector<std::pair<std::string, std::string>> bad{
      {"rediss://h:1?ca_file=/nonexistent/ca.pem",
       "ca_file \"/nonexistent/ca.pem\" cannot be read (No such file or directory)"},
      {"rediss://h:1?ca_dir=/nonexistent/cas", "ca_dir \"/nonexistent/cas\" is not a directory"},
      {"rediss://h:1?ca_file=/etc/hostname", "ca_file \"/etc/hostname\" does not hold PEM CA"},
      {"rediss://h:1?cert_file=/nonexistent/c.pem",
       "cert_file \"/nonexistent/c.pem\" cannot be read"},
      {"rediss://h:1?key_file=/k.pem", "key_file \"/k.pem\" is set without a cert_file"},
      {"rediss-cluster://h:1?ca_file=/nonexistent/ca.pem", "ca_file \"/nonexistent/ca.pem\""},
  };
  for (const auto& [uri, needle] : bad) {
    INFO(uri);
    try {
      Redis redis(uri);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.code() == errc::invalid_argument);
      CHECK_THAT(e.what(), Catch::Contains(needle));
    }
  }
  // A TLS option without TLS would silently connect in plaintext.
  RedisOptions options;
  options.tls.ca_file = "/etc/ssl/certs/ca-certificates.crt";
  try {
    Redis redis(options);
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK_THAT(e.what(), Catch::Contains("enabled is false but other TLS options are set"));
  }
  options.tls.enabled = true;
  options.unix_socket = "/tmp/redis.sock";
  try {
    Redis redis(options);
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("Redis serves TLS on a TCP port only"));
  }
  // With sentinels too: the TLS options apply to the sentinels and the master.
  RedisOptions sentinel;
  sentinel.sentinels = {"127.0.0.1:26379"};
  sentinel.sentinel_master = "mymaster";
  sentinel.tls.enabled = true;
  sentinel.tls.ca_file = "/nonexistent/ca.pem";
  try {
    Redis redis(sentinel);
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK_THAT(e.what(), Catch::Contains("ca_file \"/nonexistent/ca.pem\" cannot be read"));
  }
}

TEST_CASE("bad Redis URIs name the bad part and never the password", "[uri]") {
  const std::vector<std::pair<std::string, std::string>> bad{
      {"127.0.0.1:6379", "missing scheme"},
      {"http://x:1", "unsupported scheme \"http\""},
      {"redis://host:0", "port \"0\""},
      {"redis://host:65536", "port \"65536\""},
      {"redis://host:12ab", "port is not a number"},
      {"redis://host:6379/x", "db is not a number"},
      {"redis://:6379", "host is missing"},
      {"redis://[::1:6379", "without ']'"},
      {"unix://relative.sock", "not absolute"},
      {"unix:///tmp/r.sock?timeout=1", "unknown query"},
      {"redis-cluster://", "at least one host:port"},
      {"redis-cluster://h:1/2", "no database"},
      {"redis://u:Hunter%zz@h:1", "percent-encoding in the password"},
      {"redis://u:Hunter%4@h:1", "percent-encoding in the password"},
      {"redis://Hunter%g1:pw@h:1", "percent-encoding in the user name"},
      {"redis://h:", "port is not a number"},
      {"redis://u:Hunter2@h:-1", "port \"-1\""},
      {"redis://u:Hunter2@:6379", "host is missing"},
      {"redis://u:Hunter2@", "host is missing"},
      {"redis://u:Hunter2@h:1/-1", "db \"-1\""},
      {"redis://u:Hunter2@h:1/1/2", "db is not a number"},
      {"redis://u:Hunter2@h:1/99999999999", "db \"99999999999\""},
      {"redis://u:Hunter2@h o:1", "not allowed in a host"},
      {"redis://u:Hunter2@[::1]x", "after the IPv6 host"},
      {"redis://u:Hunter2@[fe80::1%eth0]:1", "not an IPv6 address"},
      {"redis://:Hunter2:h:6379", "has a ':'"}, // a forgotten '@': never echoed
      {"redis://::1:6379", "in brackets"},
      {"unix://:Hunter2@relative.sock", "not absolute"},
      {"unix://:Hunter2@/tmp/r.sock?db=x", "db is not a number"},
      {"Hunter2://h:1", "unsupported scheme"},
      {"redis+tls://u:Hunter2@h:1", "unsupported scheme \"redis+tls\""},
      {"redis://u:Hunter2@h:1?ca_file=/ca.pem", "\"ca_file\" is a TLS option: use rediss://"},
      {"rediss://u:Hunter2@h:1?cafile=/ca.pem", "unknown query parameter \"cafile\""},
      {"rediss://u:Hunter2@h:1?ca_file=", "\"ca_file\" has no value"},
      {"rediss://u:Hunter2@h:1?verify_peer=maybe", "verify_peer is neither yes nor no"},
      {"rediss://u:Hunter2@h:1?ca_file=%zz", "percent-encoding in the query"},
      {"rediss-cluster://u:Hunter2@?ca_file=/ca.pem", "rediss-cluster:// needs at least one"},
      {"u:Hunter2@h:6379", "missing scheme"},
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

TEST_CASE("Redis URI defaults and corner cases", "[uri]") {
  auto o = RedisOptions::from_uri("redis://cache");
  CHECK(o.host == "cache");
  CHECK(o.port == 6379);
  CHECK(o.db == 0);
  CHECK(o.unix_socket.empty());

  o = RedisOptions::from_uri("redis://cache:7000/");
  CHECK(o.port == 7000);
  CHECK(o.db == 0);

  o = RedisOptions::from_uri("redis://cache/15");
  CHECK(o.port == 6379);
  CHECK(o.db == 15);

  // a lone userinfo is the password, as redis-cli reads it
  o = RedisOptions::from_uri("redis://only-secret@cache:1");
  CHECK(o.user.empty());
  CHECK(o.password == "only-secret");

  // percent-encoded user; '@' and '/' in a password as long as the last '@' ends it
  o = RedisOptions::from_uri("redis://us%65r%2Bx:a@b/c%25@cache:1/2");
  CHECK(o.user == "user+x");
  CHECK(o.password == "a@b/c%");
  CHECK(o.host == "cache");
  CHECK(o.port == 1);
  CHECK(o.db == 2);

  o = RedisOptions::from_uri("redis://[::1]");
  CHECK(o.host == "::1");
  CHECK(o.port == 6379);

  o = RedisOptions::from_uri("redis://[2001:db8::7]:6400/1");
  CHECK(o.host == "2001:db8::7");
  CHECK(o.port == 6400);
  CHECK(o.db == 1);

  o = RedisOptions::from_uri("unix:///tmp/redis.sock");
  CHECK(o.unix_socket == "/tmp/redis.sock");
  CHECK(o.db == 0);

  o = RedisOptions::from_uri("unix://limits:p%21w@/tmp/redis.sock?db=4");
  CHECK(o.user == "limits");
  CHECK(o.password == "p!w");
  CHECK(o.unix_socket == "/tmp/redis.sock");
  CHECK(o.db == 4);

  // a base64 password keeps its '/', '?' and '=': the userinfo ends at the last "@/"
  o = RedisOptions::from_uri("unix://:a/b?c==@/tmp/redis.sock?db=5");
  CHECK(o.password == "a/b?c==");
  CHECK(o.unix_socket == "/tmp/redis.sock");
  CHECK(o.db == 5);

  // the other options keep their defaults
  const RedisOptions defaults;
  CHECK(o.command_timeout == defaults.command_timeout);
  CHECK(o.pool_size == defaults.pool_size);
}

TEST_CASE("options that could hang or cannot work are refused when Redis is made",
          "[uri][options]") {
  const auto refused = [](auto&& change) {
    RedisOptions options;
    change(options);
    try {
      Redis redis(options); // no I/O: the pool connects lazily
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.code() == errc::invalid_argument);
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(refused([](RedisOptions& o) { o.pool_size = 0; }), Catch::Contains("pool_size"));
  CHECK_THAT(refused([](RedisOptions& o) { o.command_timeout = 0ms; }),
             Catch::Contains("command_timeout"));
  CHECK_THAT(refused([](RedisOptions& o) { o.connect_timeout = -1ms; }),
             Catch::Contains("connect_timeout"));
  CHECK_THAT(refused([](RedisOptions& o) { o.pool_wait_timeout = -1ms; }),
             Catch::Contains("pool_wait_timeout"));
  CHECK_THAT(refused([](RedisOptions& o) { o.port = 0; }), Catch::Contains("port"));
  CHECK_THAT(refused([](RedisOptions& o) { o.db = -1; }), Catch::Contains("db"));
  CHECK_THAT(refused([](RedisOptions& o) { o.call_budget = -1ms; }),
             Catch::Contains("call_budget"));
  CHECK_THAT(refused([](RedisOptions& o) { o.retry.max_attempts = 0; }),
             Catch::Contains("max_attempts"));
  CHECK_THAT(refused([](RedisOptions& o) { o.retry.budget = -1ms; }), Catch::Contains("-1 ms"));
  CHECK_THAT(refused([](RedisOptions& o) { o.retry.backoff = -5ms; }), Catch::Contains("-5 ms"));
  RedisOptions fine;
  fine.pool_wait_timeout = 0ms; // "do not wait" is a valid choice
  CHECK_NOTHROW(Redis(fine));
}

TEST_CASE("every cluster seed is checked when Redis is made, and named when bad",
          "[uri][options][cluster]") {
  const auto refused = [](std::vector<std::string> seeds) {
    RedisOptions options;
    options.cluster_seeds = std::move(seeds);
    try {
      Redis redis(options); // no I/O: the slot map is read on the first call
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.code() == errc::invalid_argument);
      return std::string(e.what());
    }
    return std::string();
  };
  // before: std::stoi threw std::invalid_argument on the first call (not at construction)
  CHECK_THAT(refused({"10.0.0.1"}), Catch::Contains("\"10.0.0.1\""));
  CHECK_THAT(refused({"10.0.0.1:7000", "node-b"}), Catch::Contains("\"node-b\""));
  CHECK_THAT(refused({"node-c:"}), Catch::Contains("\"node-c:\""));
  CHECK_THAT(refused({"node-d:70000"}), Catch::Contains("\"node-d:70000\""));
  CHECK_THAT(refused({"node-e:7x"}), Catch::Contains("\"node-e:7x\""));
  CHECK_THAT(refused({":7000"}), Catch::Contains("\":7000\""));
  CHECK_THAT(refused({"::1:7000"}), Catch::Contains("\"::1:7000\""));
  RedisOptions fine;
  fine.cluster_seeds = {"10.0.0.1:7000", "[::1]:7001", "node-b:7002"};
  CHECK_NOTHROW(Redis(fine));
}

TEST_CASE("redis-sentinel URIs give the sentinels, the master name and the db", "[uri][sentinel]") {
  auto o = RedisOptions::from_uri("redis-sentinel://u:p%40w@10.0.0.1:26380,sentinel-b,[::1]:5000/"
                                  "payments/2");
  CHECK(o.sentinels ==
        std::vector<std::string>{"10.0.0.1:26380", "sentinel-b:26379", "[::1]:5000"});
  CHECK(o.sentinel_master == "payments");
  CHECK(o.db == 2);
  CHECK(o.user == "u"); // the master's credentials, not the sentinels'
  CHECK(o.password == "p@w");
  CHECK(o.sentinel_password.empty());
  CHECK(o.cluster_seeds.empty());

  o = RedisOptions::from_uri("redis-sentinel://s1:1/m?db=3");
  CHECK(o.sentinels == std::vector<std::string>{"s1:1"});
  CHECK(o.sentinel_master == "m");
  CHECK(o.db == 3);

  o = RedisOptions::from_uri("redis-sentinel://s1/m");
  CHECK(o.sentinels == std::vector<std::string>{"s1:26379"});
  CHECK(o.db == 0);
  CHECK(o.password.empty());

  const std::vector<std::pair<std::string, std::string>> bad{
      {"redis-sentinel://s1:1", "needs the master name"},
      {"redis-sentinel://s1:1/", "needs the master name"},
      {"redis-sentinel://:Hunter2@s1:1//3", "needs the master name"},
      {"redis-sentinel://:Hunter2@/m", "at least one sentinel"},
      {"redis-sentinel://:Hunter2@s1:0/m", "port \"0\""},
      {"redis-sentinel://:Hunter2@s1:1/m/x", "db is not a number"},
      {"redis-sentinel://:Hunter2@s1:1/m/1?db=2", "db is given twice"},
      {"redis-sentinel://:Hunter2@s1:1/m?timeout=2", "unknown query"},
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

TEST_CASE("sentinel options are checked when Redis is made, and the bad one named",
          "[options][sentinel]") {
  const auto refused = [](auto&& change) {
    RedisOptions options;
    options.sentinels = {"127.0.0.1:26379"};
    options.sentinel_master = "payments";
    change(options);
    try {
      Redis redis(options); // no I/O: the sentinels are asked on the first call
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.code() == errc::invalid_argument);
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(refused([](RedisOptions& o) { o.sentinels.push_back("sentinel-b"); }),
             Catch::Contains("sentinel \"sentinel-b\""));
  CHECK_THAT(refused([](RedisOptions& o) { o.sentinel_master.clear(); }),
             Catch::Contains("sentinel_master \"\""));
  CHECK_THAT(refused([](RedisOptions& o) { o.sentinel_master = "pay ments"; }),
             Catch::Contains("sentinel_master \"pay ments\""));
  CHECK_THAT(refused([](RedisOptions& o) { o.sentinel_master = "pay\xc2\xa0ments"; }),
             Catch::Contains("sentinel_master \"pay\\u00a0ments\" contains whitespace (U+00A0"));
  CHECK_THAT(refused([](RedisOptions& o) { o.cluster_seeds = {"127.0.0.1:7000"}; }),
             Catch::Contains("cluster_seeds"));
  CHECK_THAT(refused([](RedisOptions& o) { o.sentinel_recheck = -1ms; }),
             Catch::Contains("sentinel_recheck"));
  CHECK_THAT(refused([](RedisOptions& o) { o.sentinels.clear(); }),
             Catch::Contains("no sentinels"));
  RedisOptions fine;
  fine.sentinels = {"127.0.0.1:26379", "[::1]:26380"};
  fine.sentinel_master = "payments";
  fine.port = 0; // host and port are unused with sentinels
  const Redis redis(fine);
  CHECK(redis.is_sentinel());
  CHECK_FALSE(redis.is_cluster());
}
