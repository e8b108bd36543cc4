// TLS against a real redis-server listening on its TLS port only (`--port 0`, so the only way
// in is TLS), with certificates the test makes with the openssl CLI (support/tls_certificates).
#include <catch2/catch.hpp>

#include <atomic>
#include <set>
#include <string>
#include <thread>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <limitcounter/limitcounter.hpp>

#include "redis/connection.hpp"
#include "redis/key_slot.hpp"
#include "support/probe.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"
#include "support/tls_certificates.hpp"

using namespace std::chrono_literals;
using limitcounter::Calendar;
using limitcounter::Decision;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::LimitCounter;
using limitcounter::Outcome;
using limitcounter::Period;
using limitcounter::Redis;
using limitcounter::RedisOptions;
using limitcounter::Rule;
using limitcounter::RuleSet;
using limitcounter::Transaction;
using limitcounter::testing::command_calls;
using limitcounter::testing::error_of;
using limitcounter::testing::eventually;
using limitcounter::testing::probe;
using limitcounter::testing::probe_args;
using limitcounter::testing::RedisCluster;
using limitcounter::testing::RedisServer;
using limitcounter::testing::tls_certificates;
using limitcounter::testing::TlsPort;
using limitcounter::testing::unique_prefix;

namespace {

TlsPort tls_port(bool auth_clients = false) {
  const auto& certs = tls_certificates();
  TlsPort port;
  port.ca_file = certs.ca_file();
  port.cert_file = certs.server_cert_file();
  port.key_file = certs.server_key_file();
  port.auth_clients = auth_clients;
  port.client_cert_file = certs.client_cert_file();
  port.client_key_file = certs.client_key_file();
  return port;
}

// The error of the first command through `options`: every connection failure is a
// connect_failed that sent nothing.
Error connect_error(const RedisOptions& options) {
  Redis redis(options);
  Error error = error_of([&] { redis.command({"PING"}); });
  CHECK(error.code() == errc::connect_failed);
  CHECK(error.outcome() == Outcome::not_sent);
  return error;
}

} // namespace

TEST_CASE("scripts and a consume run over TLS with the server's certificate verified", "[tls]") {
  RedisServer server({}, tls_port());
  RedisOptions options = server.options();
  REQUIRE(options.tls.verify_peer);
  Redis redis(options);
  // The server has no plaintext port: this connection is TLS.
  CHECK(redis.command({"CONFIG", "GET", "port"}).as_array()[1].as_string() == "0");
  CHECK(redis.command({"CONFIG", "GET", "tls-port"}).as_array()[1].as_string() ==
        std::to_string(server.port()));

  const std::string key = unique_prefix() + "probe";
  redis.eval(probe, {key}, probe_args());
  CHECK(redis.command({"HGET", key, "f"}).as_string() == "1:10");

  LimitCounter counter(redis, Calendar("UTC"));
  counter.set_rules(RuleSet().add(Rule("day").where("merchant").per(Period::day).max_count(1)));
  const Transaction tx{unique_prefix() + "order", {{"merchant", "m1"}}, 100};
  CHECK(counter.consume(tx).allowed());
  const Transaction second{unique_prefix() + "order", {{"merchant", "m1"}}, 100};
  CHECK_FALSE(counter.consume(second).allowed());

  // The server's name may be given apart from the host connected to (SNI and verification).
  options.tls.server_name = "localhost";
  CHECK(Redis(options).command({"PING"}).as_string() == "PONG");
  // From the URI too.
  CHECK(Redis("rediss://127.0.0.1:" + std::to_string(server.port()) +
              "?ca_file=" + tls_certificates().ca_file())
            .command({"PING"})
            .as_string() == "PONG");
}

TEST_CASE("a server that requires a client certificate takes ours and refuses none, clearly",
          "[tls]") {
  RedisServer server({}, tls_port(true));
  RedisOptions options = server.options();
  REQUIRE_FALSE(options.tls.cert_file.empty());
  CHECK(Redis(options).command({"PING"}).as_string() == "PONG");

  options.tls.cert_file.clear();
  options.tls.key_file.clear();
  const Error error = connect_error(options);
  CHECK_THAT(error.what(), Catch::Contains("127.0.0.1:" + std::to_string(server.port())));
  CHECK_THAT(error.what(), Catch::Contains("the server requires a client certificate"));
}

TEST_CASE("a server certificate from an unknown CA is refused, naming the verification failure",
          "[tls]") {
  RedisServer server({}, tls_port());
  RedisOptions options = server.options();
  options.tls.ca_file = tls_certificates().other_ca_file();
  const Error error = connect_error(options);
  CHECK_THAT(error.what(), Catch::Contains("127.0.0.1:" + std::to_string(server.port())));
  // The server sends its CA along: the chain ends in a root that is not ours.
  CHECK_THAT(error.what(), Catch::Contains("the server's certificate failed verification: ") &&
                               (Catch::Contains("self-signed certificate in certificate chain") ||
                                Catch::Contains("unable to get local issuer certificate")));

  // Without verification (tests only), the same CA does not matter.
  options.tls.verify_peer = false;
  CHECK(Redis(options).command({"PING"}).as_string() == "PONG");
}

TEST_CASE("a server certificate for another name is refused, naming the name checked", "[tls]") {
  RedisServer server({}, tls_port());
  RedisOptions options = server.options();
  options.tls.server_name = "wrong.example";
  const Error error = connect_error(options);
  CHECK_THAT(error.what(), Catch::Contains("failed verification: hostname mismatch"));
  CHECK_THAT(error.what(), Catch::Contains("\"wrong.example\""));

  // An address is checked against the certificate's IP names (127.0.0.1 only).
  options.tls.server_name = "127.0.0.2";
  CHECK_THAT(connect_error(options).what(), Catch::Contains("IP address mismatch"));
}

TEST_CASE("a TLS client at a plaintext port fails clearly, not by a hang", "[tls]") {
  RedisServer server; // plaintext only
  RedisOptions options = server.options();
  options.tls.enabled = true;
  options.tls.ca_file = tls_certificates().ca_file();
  // A plaintext Redis reads the ClientHello as an inline command: it answers an error if a
  // newline byte happens to be in it, else it waits for one, until the connect timeout.
  options.connect_timeout = 500ms;
  const Error error = connect_error(options);
  CHECK_THAT(error.what(), Catch::Contains("over TLS"));
  CHECK_THAT(error.what(), Catch::Contains("is it a plaintext port?"));
}

// A server that accepts one connection and answers the ClientHello with the header of a
// 16 KiB handshake record, then one byte of it every 20 ms: each byte comes well within
// the connect timeout, the record never completes. It stops after `limit` bytes and closes
// (so that a handshake without a deadline fails too, as a close, instead of a hang).
class TricklingServer {
public:
  TricklingServer() {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof(address);
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
    REQUIRE(::listen(listener_, 1) == 0);
    REQUIRE(::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &size) == 0);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~TricklingServer() {
    ::shutdown(listener_, SHUT_RDWR); // ends an accept still waiting
    thread_.join();
    ::close(listener_);
  }
  TricklingServer(const TricklingServer&) = delete;
  TricklingServer& operator=(const TricklingServer&) = delete;
  int port() const { return port_; }

private:
  void serve() {
    const int client = ::accept(listener_, nullptr, nullptr);
    if (client < 0) {
      return;
    }
    const unsigned char header[] = {0x16, 0x03, 0x03, 0x40, 0x00};
    bool open = ::send(client, header, sizeof(header), MSG_NOSIGNAL) == sizeof(header);
    const char byte = 0;
    for (int sent = 0; open && sent < limit; ++sent) {
      std::this_thread::sleep_for(20ms);
      open = ::send(client, &byte, 1, MSG_NOSIGNAL) == 1; // fails once the client closed
    }
    ::close(client);
  }

  static constexpr int limit = 500; // 10 s of bytes
  int listener_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST_CASE("a server trickling its handshake cannot stretch the connect timeout", "[tls]") {
  TricklingServer server;
  RedisOptions options;
  options.host = "127.0.0.1";
  options.port = server.port();
  options.tls.enabled = true;
  options.tls.ca_file = tls_certificates().ca_file();
  options.connect_timeout = 300ms;
  const Error error = connect_error(options);
  CHECK_THAT(error.what(), Catch::Contains("127.0.0.1:" + std::to_string(server.port())));
  CHECK_THAT(error.what(), Catch::Contains("no TLS handshake within the connect timeout (300 ms)"));
}

TEST_CASE("a plaintext client at the TLS port fails clearly, not by a hang", "[tls]") {
  RedisServer server({}, tls_port());
  RedisOptions options = server.options();
  options.tls = {};
  const Error error = connect_error(options);
  CHECK_THAT(error.what(), Catch::Contains("127.0.0.1:" + std::to_string(server.port())));
  CHECK_THAT(error.what(), Catch::Contains("if it is a TLS port, use rediss://"));
}

TEST_CASE("a reply lost over TLS is Outcome::unknown, and the command ran", "[tls][fault]") {
  RedisServer server({"--enable-debug-command", "yes"}, tls_port());
  RedisOptions options = server.options();
  Redis admin(options);
  options.command_timeout = 200ms;
  auto connection = limitcounter::detail::Connection::open(options, options.host, options.port);
  const std::string key = unique_prefix() + "ran";
  // One TLS write: the server sleeps past our timeout, then runs the INCR whose reply is lost.
  const Error error = error_of([&] {
    connection->run_pipeline({{"DEBUG", "SLEEP", "0.5"}, {"INCR", key}});
  });
  CHECK(error.code() == errc::timeout);
  CHECK(error.outcome() == Outcome::unknown);
  CHECK(connection->broken());
  // The server's side: it ran the command.
  CHECK(eventually([&] { return !admin.command({"GET", key}).is_nil(); }));
  CHECK(admin.command({"GET", key}).as_string() == "1");
  CHECK(command_calls(admin, "incr") == 1);
}

TEST_CASE("a cluster over TLS: every node is verified by its own host", "[tls][cluster]") {
  RedisCluster cluster(3, 0, tls_port());
  RedisOptions options = cluster.options();
  Redis redis(options);
  REQUIRE(redis.is_cluster());
  // Keys in every master's slots: the slot map (CLUSTER SLOTS, asked over TLS) names the TLS
  // ports, and each node's connection verifies 127.0.0.1 against its certificate.
  const std::string prefix = unique_prefix();
  std::vector<limitcounter::ScriptCall> calls;
  for (int i = 0; i < 12; ++i) {
    calls.push_back({&probe, {prefix + std::to_string(i)}, probe_args()});
  }
  for (const auto& reply : redis.eval_pipeline(calls)) {
    CHECK_FALSE(reply.is_error());
  }
  std::set<RedisServer*> owners;
  for (int i = 0; i < 12; ++i) {
    const std::string key = prefix + std::to_string(i);
    CHECK(redis.command({"HGET", key, "f"}).as_string() == "1:10");
    owners.insert(&cluster.owner_of(limitcounter::detail::key_slot(key)));
  }
  CHECK(owners.size() == 3);
  // The same options apply to every node: a wrong name fails each of them.
  options.tls.server_name = "wrong.example";
  CHECK_THAT(connect_error(options).what(), Catch::Contains("hostname mismatch"));
}
