// No message shows the password: not a URI parse error of any scheme, however malformed, nor
// an error a server answered to the AUTH that carried it (a server without AUTH repeats its
// arguments), nor what an observer's on_error receives. limitctl's side is in limitctl_test.cpp.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include <limitcounter/limit_counter.hpp>
#include <limitcounter/observer.hpp>

#include "support/redis_server.hpp"
#include "support/secret.hpp"

using limitcounter::errc;
using limitcounter::Error;
using limitcounter::Redis;
using limitcounter::RedisOptions;
using limitcounter::testing::known_secret;
using limitcounter::testing::RedisServer;
using limitcounter::testing::shows_secret;

namespace {

struct ErrorLog : limitcounter::LimitObserver {
  std::vector<std::string> texts;
  void on_error(const Error& error) override { texts.emplace_back(error.what()); }
};

// The error count INFO errorstats gives for `code` (0 before the first).
long long error_count(Redis& redis, const std::string& code) {
  const std::string info = redis.command({"INFO", "errorstats"}).as_string();
  const std::string field = "errorstat_" + code + ":count=";
  const auto at = info.find(field);
  return at == std::string::npos ? 0 : std::stoll(info.substr(at + field.size()));
}

} // namespace

TEST_CASE("a malformed URI of any scheme is refused without showing the password in it",
          "[uri][secret]") {
  for (const std::string& uri : limitcounter::testing::malformed_uris_with_secret()) {
    INFO(uri);
    try {
      RedisOptions::from_uri(uri);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.code() == errc::invalid_argument);
      UNSCOPED_INFO(e.what());
      CHECK_FALSE(shows_secret(e.what()));
    }
    try {
      Redis redis{std::string_view(uri)};
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK_FALSE(shows_secret(e.what()));
    }
  }
}

TEST_CASE("a server without AUTH answers the password back; no error or observer shows it",
          "[redis][secret][standalone]") {
  // AUTH renamed away: the server answers "ERR unknown command 'AUTH', with args beginning
  // with: 'user' '<password>'", as a proxy that does not know AUTH may too.
  RedisServer server({"--rename-command", "AUTH", ""});
  Redis plain(server.options());
  const long long errors_before = error_count(plain, "ERR");

  for (const std::string user : {"", "limitctl-user"}) {
    INFO("user " << user);
    RedisOptions options = server.options();
    options.user = user;
    options.password = std::string(known_secret);
    Redis redis(options);
    try {
      redis.command({"PING"});
      FAIL("connected without AUTH");
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(e.code() == errc::connect_failed);
      CHECK_THAT(e.what(), Catch::Contains("AUTH") && Catch::Contains("ERR"));
      CHECK_FALSE(shows_secret(e.what()));
    }

    auto log = std::make_shared<ErrorLog>();
    limitcounter::LimitCounterOptions counter_options;
    counter_options.observer = log;
    limitcounter::LimitCounter limits(redis, limitcounter::Calendar("UTC"), counter_options);
    limits.set_rules(limitcounter::RuleSet().add(limitcounter::Rule("merchant-day")
                                                     .where("merchant")
                                                     .per(limitcounter::Period::day)
                                                     .max_count(5)));
    try {
      limits.consume({"tx-1", {{"merchant", "m1"}}, 100});
      FAIL("consumed without AUTH");
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(e.code() == errc::connect_failed);
      CHECK_FALSE(shows_secret(e.what()));
    }
    REQUIRE_FALSE(log->texts.empty());
    for (const std::string& text : log->texts) {
      INFO(text);
      CHECK_FALSE(shows_secret(text));
    }
  }
  // The server did answer every AUTH with an error (the text withheld was its own).
  CHECK(error_count(plain, "ERR") >= errors_before + 4);
}
