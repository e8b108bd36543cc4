// limitctl end to end: the built binary (LIMITCTL_PATH) against the test server or cluster,
// on data written by the library; its output (--json matched loosely) and its exit codes.
#include <catch2/catch.hpp>

#include <array>
#include <atomic>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <limitcounter/journal_consumer.hpp>
#include <limitcounter/limit_counter.hpp>
#include <limitcounter/red_packet.hpp>
#include <limitcounter/wallet.hpp>

#include "redis/server_check.hpp"
#include "support/redis_server.hpp"
#include "support/secret.hpp"
#include "support/topology.hpp"

using namespace std::chrono_literals;
using limitcounter::Dimension;
using limitcounter::Period;
using limitcounter::Redis;
using limitcounter::Usage;
using limitcounter::testing::known_secret;
using limitcounter::testing::on_cluster;
using limitcounter::testing::RedisServer;
using limitcounter::testing::shows_secret;
using limitcounter::testing::test_options;
using limitcounter::testing::unique_prefix;

namespace {

struct Run {
  int code = -1;
  std::string out; ///< standard output and error
};

std::string shell_quoted(const std::string& word) {
  std::string quoted = "'";
  for (const char c : word) {
    quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  }
  return quoted + "'";
}

// The URI of the topology this run uses.
std::string test_uri() {
  const auto options = test_options();
  if (options.cluster_seeds.empty()) {
    return "redis://" + options.host + ":" + std::to_string(options.port);
  }
  std::string uri = "redis-cluster://";
  for (std::size_t i = 0; i < options.cluster_seeds.size(); ++i) {
    uri += (i ? "," : "") + options.cluster_seeds[i];
  }
  return uri;
}

// Runs limitctl with `args` (and --uri of the test topology unless `with_uri` is false), with
// `environment` ("NAME=value") set.
Run limitctl(const std::vector<std::string>& args, bool with_uri = true,
             const std::vector<std::string>& environment = {}) {
  // The environment's defaults must not leak into what is tested.
  std::string command =
      "env -u LIMITCOUNTER_REDIS_URI -u LIMITCOUNTER_TZ -u LIMITCOUNTER_COUNTER_BUCKETS "
      "-u LIMITCOUNTER_REDIS_PASSWORD -u LIMITCOUNTER_REDIS_PASSWORD_FILE ";
  for (const auto& variable : environment) {
    command += shell_quoted(variable) + " ";
  }
  command += shell_quoted(LIMITCTL_PATH);
  if (with_uri) {
    command += " --uri " + shell_quoted(test_uri());
  }
  for (const auto& arg : args) {
    command += " " + shell_quoted(arg);
  }
  command += " 2>&1";
  Run run;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer{};
  while (const std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) {
    run.out.append(buffer.data(), n);
  }
  const int status = pclose(pipe);
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// A temporary file holding `text`, removed with the object.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& text) {
    char name[] = "/tmp/limitctl-test-XXXXXX";
    const int fd = mkstemp(name);
    REQUIRE(fd >= 0);
    close(fd);
    path = name;
    std::ofstream(path) << text;
  }
  ~TempFile() { std::remove(path.c_str()); }
};

struct CounterData {
  std::string prefix = unique_prefix() + "ctl:";
  limitcounter::Calendar calendar{"Asia/Shanghai"};
  limitcounter::LimitCounter counter{Redis(test_options()), calendar, options()};
  limitcounter::TimePoint at = limitcounter::Clock::now();

  limitcounter::LimitCounterOptions options() const {
    limitcounter::LimitCounterOptions o;
    o.key_prefix = prefix;
    return o;
  }
  std::vector<std::string> with(std::vector<std::string> args) const {
    for (const auto& arg : {"--prefix", prefix.c_str(), "--tz", "Asia/Shanghai", "--json"}) {
      args.emplace_back(arg);
    }
    return args;
  }
  // `with`, and --at `at` itself, so that a run crossing midnight still reads the day written.
  std::vector<std::string> dated(std::vector<std::string> args) const {
    const std::time_t seconds = std::chrono::system_clock::to_time_t(at);
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
    args.emplace_back("--at");
    args.emplace_back(text);
    return with(std::move(args));
  }
};

} // namespace

TEST_CASE_METHOD(CounterData, "limitctl --buckets reads counters spread over buckets",
                 "[limitctl][redis][buckets]") {
  limitcounter::LimitCounterOptions spread = options();
  spread.counter_buckets = 64;
  limitcounter::LimitCounter writer{Redis(test_options()), calendar, spread};
  writer.add("channel", Dimension{"Ali", "Deduct", "cmb"}, {Period::day}, 3, 900, at);
  writer.add("channel", Dimension{"Wx", "Pay", "icbc"}, {Period::day}, 1, 50, at);
  const std::string key = prefix + "{" +
                          std::to_string(limitcounter::crc16("Ali+Deduct+cmb") % 16384 % 64) +
                          ":channel}:day:" + calendar.window(Period::day, at).id;

  const Run usage =
      limitctl(dated({"usage", "channel", "Ali+Deduct+cmb", "--period", "day", "--buckets", "64"}));
  CHECK(usage.code == 0);
  CHECK_THAT(usage.out, Catch::Contains("\"key\":\"" + key + "\""));
  CHECK_THAT(usage.out, Catch::Contains("\"count\":3,\"amount\":900"));
  // a reader with another bucket count looks in other hashes
  const Run unbucketed = limitctl(dated({"usage", "channel", "Ali+Deduct+cmb", "--period", "day"}));
  CHECK_THAT(unbucketed.out, Catch::Contains("\"count\":0,\"amount\":0"));

  const Run top = limitctl(dated({"top", "channel", "day", "--buckets", "64"}));
  CHECK(top.code == 0);
  CHECK_THAT(top.out, Catch::Contains("\"dimensions_seen\":2"));
  CHECK(limitctl(with({"usage", "channel", "Ali", "--buckets", "0"})).code == 2);
}

TEST_CASE_METHOD(CounterData, "limitctl usage and top read what the library counted",
                 "[limitctl][redis]") {
  counter.add("channel", Dimension{"Ali", "Deduct", "cmb"}, {Period::day, Period::month}, 3, 900,
              at);
  counter.add("channel", Dimension{"Wx", "Deduct", "icbc"}, {Period::day}, 5, 100, at);
  counter.add("channel", Dimension{"Ali", "Pay", "cib"}, {Period::day}, 1, 5000, at);
  const std::string day = calendar.window(Period::day, at).id;

  const Run usage = limitctl(dated({"usage", "channel", "Ali+Deduct+cmb"}));
  CHECK(usage.code == 0);
  CHECK_THAT(usage.out, Catch::Contains("{\"period\":\"day\",\"window\":\"" + day + "\""));
  CHECK_THAT(usage.out, Catch::Contains("\"count\":3,\"amount\":900"));
  CHECK_THAT(usage.out, Catch::Contains("\"period\":\"year\""));
  // Without --period every period is shown, the short ones too.
  CHECK_THAT(usage.out, Catch::Contains("{\"period\":\"minute\","));
  CHECK_THAT(usage.out, Catch::Contains("{\"period\":\"hour\","));

  const Run by_amount = limitctl(dated({"top", "channel", "day", "--n", "2"}));
  CHECK(by_amount.code == 0);
  CHECK_THAT(by_amount.out,
             Catch::Contains("\"top\":[{\"dimension\":\"Ali+Pay+cib\",\"count\":1,\"amount\":5000},"
                             "{\"dimension\":\"Ali+Deduct+cmb\",\"count\":3,\"amount\":900}]"));
  const Run by_count = limitctl(dated({"top", "channel", "day", "--by", "count", "--n", "1"}));
  CHECK_THAT(by_count.out, Catch::Contains("\"top\":[{\"dimension\":\"Wx+Deduct+icbc\""));

  // An absolute --at of another day sees nothing of today.
  const Run other_day = limitctl(with({"usage", "channel", "Ali+Deduct+cmb", "--period", "day",
                                       "--at", "2020-01-01T12:00:00+08:00"}));
  CHECK(other_day.code == 0);
  CHECK_THAT(other_day.out, Catch::Contains("\"window\":\"20200101\""));
  CHECK_THAT(other_day.out, Catch::Contains("\"count\":0,\"amount\":0"));

  // Bad input: exit 2, the bad value named.
  const Run bad_dimension = limitctl(with({"usage", "channel", "Ali++cmb"}));
  CHECK(bad_dimension.code == 2);
  CHECK_THAT(bad_dimension.out, Catch::Contains("Ali++cmb"));
  const Run bad_time = limitctl(with({"usage", "channel", "Ali", "--at", "yesterday"}));
  CHECK(bad_time.code == 2);
  CHECK_THAT(bad_time.out, Catch::Contains("\"yesterday\""));
  CHECK(limitctl(with({"top", "channel", "fortnight"})).code == 2);
  CHECK(limitctl(with({"usage"})).code == 2); // a CLI11 parse error
}

TEST_CASE_METHOD(CounterData, "limitctl adjust corrects a counter with an audit entry, once",
                 "[limitctl][redis]") {
  const Dimension dimension{"Ali", "Deduct", "cmb"};
  counter.add("channel", dimension, {Period::day}, 3, 900, at);
  const auto adjust =
      dated({"adjust", "channel", "Ali+Deduct+cmb", "day", "--count", "-1", "--amount", "-300",
             "--reason", "duplicate of tx 42", "--author", "alice", "--id", "fix-7"});
  const Run first = limitctl(adjust);
  CHECK(first.code == 0);
  CHECK_THAT(first.out, Catch::Contains("\"after_count\":2,\"after_amount\":600"));
  CHECK_THAT(first.out, Catch::Contains("\"replayed\":false"));
  CHECK(counter.usage("channel", dimension, Period::day, at) == Usage{2, 600});
  const auto entries =
      Redis(test_options()).command({"XLEN", counter.keys().audit("channel")}).as_integer();
  CHECK(entries == 1);

  // The same --id again (a retry after a lost reply) moves nothing more.
  const Run again = limitctl(adjust);
  CHECK(again.code == 0);
  CHECK_THAT(again.out, Catch::Contains("\"replayed\":true"));
  CHECK(counter.usage("channel", dimension, Period::day, at) == Usage{2, 600});

  // No reason: exit 2 and nothing written; a total below zero: exit 2, nothing written.
  CHECK(limitctl(dated({"adjust", "channel", "Ali+Deduct+cmb", "day", "--count", "1"})).code == 2);
  const Run negative = limitctl(dated(
      {"adjust", "channel", "Ali+Deduct+cmb", "day", "--amount", "-601", "--reason", "too much"}));
  CHECK(negative.code == 2);
  CHECK_THAT(negative.out, Catch::Contains("amount -1"));
  // The same id for another correction: a conflict, exit 4.
  auto reused = adjust;
  reused[5] = "-2";
  CHECK(limitctl(reused).code == 4);
  CHECK(counter.usage("channel", dimension, Period::day, at) == Usage{2, 600});
  CHECK(Redis(test_options()).command({"XLEN", counter.keys().audit("channel")}).as_integer() == 1);
}

TEST_CASE_METHOD(CounterData, "limitctl tx shows a transaction's record, exit 1 when absent",
                 "[limitctl][redis]") {
  limitcounter::RuleSet rules;
  rules.add(limitcounter::Rule("merchant-day").where("merchant").per(Period::day).max_amount(1000));
  counter.set_rules(rules);
  limitcounter::Transaction transaction{"ctl-tx-1", {{"merchant", "m9"}}, 700, at};
  REQUIRE(counter.consume(transaction).allowed());
  counter.refund("ctl-tx-1", 100, "r1");

  // On a cluster the record of a one-slot transaction lives in its counter's slot: --counter.
  const Run shown = limitctl(with({"tx", "ctl-tx-1", "--counter", "merchant"}));
  CHECK(shown.code == 0);
  CHECK_THAT(shown.out, Catch::Contains("\"state\":\"consumed\",\"amount\":700,\"refunded\":100"));
  // the window it counted in, by its key
  CHECK_THAT(shown.out, Catch::Contains(
                            counter.keys().window(counter.keys().tag("merchant", "m9"), Period::day,
                                                  calendar.window(Period::day, at).id)));
  CHECK_THAT(shown.out, Catch::Contains("{\"refund_id\":\"r1\",\"amount\":100}"));

  const Run absent = limitctl(with({"tx", "no-such-tx"}));
  CHECK(absent.code == 1);
  CHECK_THAT(absent.out, Catch::Contains("no-such-tx"));
}

TEST_CASE("limitctl wallet show, compare, freeze and journal-lag", "[limitctl][redis]") {
  const std::string prefix = unique_prefix() + "w:";
  limitcounter::WalletOptions options;
  options.key_prefix = prefix;
  options.partitions = 2;
  limitcounter::Wallet wallet(Redis(test_options()), options);
  wallet.load("ann", {10'000, 3, 0});
  wallet.deduct("ann", "order-1", 2'500);
  const std::vector<std::string> common{"--prefix", prefix, "--partitions", "2", "--json"};
  const auto with = [&common](std::vector<std::string> args) {
    args.insert(args.end(), common.begin(), common.end());
    return args;
  };

  const Run shown = limitctl(with({"wallet", "show", "ann"}));
  CHECK(shown.code == 0);
  CHECK_THAT(shown.out, Catch::Contains("\"balance\":7500"));
  CHECK_THAT(shown.out, Catch::Contains("\"version\":4"));
  CHECK_THAT(shown.out, Catch::Contains("\"pending_orders\":[\"order-1\"]"));
  CHECK(limitctl(with({"wallet", "show", "bob"})).code == 1);

  CHECK(limitctl(with({"wallet", "compare", "ann", "7500", "4"})).code == 0);
  const Run differs = limitctl(with({"wallet", "compare", "ann", "7500", "3"}));
  CHECK(differs.code == 4);
  CHECK_THAT(differs.out, Catch::Contains("\"matches\":false"));

  const Run frozen =
      limitctl(with({"wallet", "freeze", "ann", "--reason", "chargeback", "--author", "ops"}));
  CHECK(frozen.code == 0);
  CHECK_THAT(frozen.out, Catch::Contains("\"changed\":true"));
  const auto account = wallet.account("ann");
  REQUIRE(account);
  CHECK(account->frozen);
  CHECK(account->freeze_reason == "ops: chargeback");
  CHECK(wallet.deduct("ann", "order-2", 1).status == limitcounter::WalletResult::Status::frozen);
  CHECK(limitctl(with({"wallet", "freeze", "ann"})).code == 2); // --reason is required
  CHECK(limitctl(with({"wallet", "unfreeze", "ann", "--reason", "resolved"})).code == 0);
  CHECK_FALSE(wallet.account("ann")->frozen);

  const Run lag = limitctl(with({"wallet", "journal-lag"}));
  CHECK(lag.code == 0);
  const auto partition = std::to_string(wallet.keys().partition_of("ann"));
  // deduct + freeze + unfreeze: three events in ann's partition, one order unpersisted.
  CHECK_THAT(lag.out,
             Catch::Contains("{\"partition\":" + partition + ",\"length\":3,\"unpersisted\":1"));

  // With consumer groups: "audit" created by hand (nothing read), "persister" has read the
  // three events without acknowledging them.
  const std::string journal = wallet.keys().journal(wallet.keys().partition_of("ann"));
  Redis redis(test_options());
  REQUIRE_FALSE(redis.command({"XGROUP", "CREATE", journal, "audit", "0"}).is_error());
  limitcounter::JournalConsumer persister(redis, options);
  REQUIRE(persister.read(wallet.keys().partition_of("ann")).size() == 3);
  const Run grouped = limitctl(with({"wallet", "journal-lag"}));
  CHECK(grouped.code == 0);
  CHECK_THAT(grouped.out,
             Catch::Contains("{\"partition\":" + partition +
                             ",\"length\":3,\"unpersisted\":1,\"groups\":[{\"group\":\"audit\","
                             "\"pending\":0,\"lag\":3},{\"group\":\"persister\",\"pending\":3,"
                             "\"lag\":0}]}"));
}

namespace {

// A server that passes the connection's server check (it answers the two INFO commands as a
// Redis 7.2 without eviction, and COMMAND INFO as a server that knows every command asked) and
// then never answers again: the next command's reply is lost
// (Outcome::unknown). One thread per connection; all stop with the object.
class SilentServer {
public:
  SilentServer() {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(listener_ >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof address;
    REQUIRE(bind(listener_, reinterpret_cast<sockaddr*>(&address), size) == 0);
    REQUIRE(listen(listener_, 16) == 0);
    REQUIRE(getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &size) == 0);
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~SilentServer() {
    stop_ = true;
    acceptor_.join();
    for (auto& thread : connections_) {
      thread.join();
    }
    close(listener_);
  }
  SilentServer(const SilentServer&) = delete;
  SilentServer& operator=(const SilentServer&) = delete;

  std::string uri() const { return "redis://127.0.0.1:" + std::to_string(port_); }

private:
  void accept_loop() {
    while (!stop_) {
      pollfd ready{listener_, POLLIN, 0};
      if (poll(&ready, 1, 50) == 1) {
        const int fd = accept(listener_, nullptr, nullptr);
        if (fd >= 0) {
          connections_.emplace_back([this, fd] { serve(fd); });
        }
      }
    }
  }
  void serve(int fd) const {
    const std::string info =
        "redis_version:7.2.0\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n";
    const std::string reply = "$" + std::to_string(info.size()) + "\r\n" + info + "\r\n";
    // One (non-nil) entry per command asked: every command is known.
    std::string command_info =
        "*" + std::to_string(limitcounter::detail::checked_commands().size()) + "\r\n";
    for (std::size_t i = 0; i < limitcounter::detail::checked_commands().size(); ++i) {
      command_info += "*1\r\n:0\r\n";
    }
    std::string received;
    int answered = 0;
    std::array<char, 4096> buffer{};
    while (!stop_) {
      pollfd ready{fd, POLLIN, 0};
      if (poll(&ready, 1, 50) != 1) {
        continue;
      }
      const ssize_t n = recv(fd, buffer.data(), buffer.size(), 0);
      if (n <= 0) {
        break; // the client closed
      }
      received.append(buffer.data(), static_cast<std::size_t>(n));
      // The check's three commands ("INFO", "INFO", "COMMAND INFO ...") are answered at once;
      // everything after them is read and never answered.
      for (std::size_t at = received.find("INFO"); at != std::string::npos && answered < 3;
           at = received.find("INFO", at + 1)) {
        if (++answered == 3) {
          const std::string all = reply + reply + command_info;
          // (No Catch assertion off the test's thread: a short send shows as the test failing.)
          if (send(fd, all.data(), all.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(all.size())) {
            break;
          }
        }
      }
    }
    close(fd);
  }

  int listener_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> connections_; ///< only the acceptor adds, joined after it
};

} // namespace

TEST_CASE("limitctl: a read whose reply is lost changed nothing, a write may have run",
          "[limitctl]") {
  SilentServer server;
  const auto with = [&server](std::vector<std::string> args) {
    args.insert(args.begin(), {"--uri", server.uri(), "--timeout", "200"});
    return args;
  };
  const Run read = limitctl(with({"wallet", "show", "ann"}), false);
  const Run write = limitctl(with({"wallet", "freeze", "ann", "--reason", "x"}), false);
  CHECK(read.code == 3);
  CHECK_THAT(read.out, Catch::Contains("(a read: nothing changed, retry)"));
  CHECK_THAT(read.out, !Catch::Contains("retry with the same id"));
  CHECK(write.code == 3);
  CHECK_THAT(write.out, Catch::Contains("(may have run: retry with the same id)"));
}

TEST_CASE("limitctl packet show, dead-letters and requeue", "[limitctl][redis]") {
  const std::string prefix = unique_prefix() + "rp:";
  limitcounter::RedPacketOptions options;
  options.key_prefix = prefix;
  options.partitions = 2;
  options.max_payout_attempts = 1;
  limitcounter::RedPacketPool pool(Redis(test_options()), options);
  pool.create("pk", {300, 700});
  REQUIRE(pool.grab("pk", "cy").status == limitcounter::GrabResult::Status::granted);
  const std::vector<std::string> common{"--prefix", prefix, "--partitions", "2", "--json"};
  const auto with = [&common](std::vector<std::string> args) {
    args.insert(args.end(), common.begin(), common.end());
    return args;
  };

  const Run shown = limitctl(with({"packet", "show", "pk"}));
  CHECK(shown.code == 0);
  CHECK_THAT(shown.out, Catch::Contains("\"state\":\"open\",\"total\":1000,\"count\":2,"
                                        "\"packets_left\":1"));
  CHECK(limitctl(with({"packet", "show", "nope"})).code == 1);

  const auto partition = pool.keys().partition_of("pk");
  const auto tasks = pool.take_payouts(partition, 10);
  REQUIRE(tasks.size() == 1);
  REQUIRE(pool.fail_payout(tasks[0])); // one attempt allowed: dead
  const Run dead = limitctl(with({"packet", "dead-letters"}));
  CHECK(dead.code == 0);
  CHECK_THAT(dead.out, Catch::Contains("\"task\":\"pk:cy\",\"amount\":" +
                                       std::to_string(tasks[0].amount) + ",\"attempts\":1"));

  const Run requeued = limitctl(with({"packet", "requeue", "pk:cy"}));
  CHECK(requeued.code == 0);
  CHECK(pool.dead_payouts(partition).empty());
  CHECK(pool.take_payouts(partition, 10).size() == 1);
  CHECK(limitctl(with({"packet", "requeue", "pk:cy"})).code == 1); // not dead any more
  CHECK(limitctl(with({"packet", "requeue", "no-colon"})).code == 2);
}

TEST_CASE("limitctl functions list and prune another version's library on every master",
          "[limitctl][redis][functions]") {
  const std::string old_name = "limitcounter_limit_00000000000000cc";
  std::vector<Redis> masters = limitcounter::testing::master_clients();
  for (Redis& master : masters) {
    master.command({"FUNCTION", "LOAD", "REPLACE",
                    "#!lua name=" + old_name + "\nredis.register_function('" + old_name +
                        "', function() return 1 end)\n"});
  }
  const std::string listed_old = "\"library\":\"" + old_name + "\",\"current\":false";
  const Run listed = limitctl({"functions", "list", "--json"});
  CHECK(listed.code == 0);
  CHECK_THAT(listed.out, Catch::Contains(listed_old));

  const Run pruned = limitctl({"functions", "prune", "--json"});
  CHECK(pruned.code == 0);
  CHECK_THAT(pruned.out, Catch::Contains("\"deleted\":[{\"master\":"));
  CHECK_THAT(pruned.out, Catch::Contains(listed_old));
  for (Redis& master : masters) {
    const limitcounter::Reply left = master.command({"FUNCTION", "LIST", "LIBRARYNAME", old_name});
    CHECK(left.as_array().empty());
  }
  const Run again = limitctl({"functions", "list", "--json"});
  CHECK(again.code == 0);
  CHECK_THAT(again.out, !Catch::Contains(old_name));
}

TEST_CASE("limitctl rules apply, history, diff and rollback on a rule store", "[limitctl][redis]") {
  const std::string prefix = unique_prefix() + "lc:";
  const TempFile first("format: 1\nrules:\n  - name: merchant-day\n    where: [merchant]\n"
                       "    per: day\n    max_amount: 1000\n");
  const TempFile second("format: 1\nrules:\n  - name: merchant-day\n    where: [merchant]\n"
                        "    per: day\n    max_amount: 2000\n  - name: cmb-day\n"
                        "    where: [dept: cmb]\n    per: day\n    max_count: 5\n");
  const TempFile bad("format: 1\nrules:\n  - name: broken\n    where: [merchant]\n"
                     "    per: day\n    max_amount: -5\n");
  const auto store = [&prefix](std::vector<std::string> args) {
    for (const char* arg : {"--store", "router", "--prefix", prefix.c_str(), "--json"}) {
      args.emplace_back(arg);
    }
    return args;
  };
  const Run valid = limitctl({"rules", "validate", second.path, "--json"}, false);
  CHECK(valid.code == 0);
  CHECK_THAT(valid.out, Catch::Contains("\"rules\":2"));
  const Run invalid = limitctl({"rules", "validate", bad.path}, false);
  CHECK(invalid.code == 2);
  CHECK_THAT(invalid.out, Catch::Contains(bad.path + ":6: rule \"broken\""));

  CHECK(limitctl(store({"rules", "history"})).code == 1); // nothing stored yet
  CHECK(limitctl(store({"rules", "apply", first.path, "--author", "al", "--reason", "start",
                        "--expect-version", "0"}))
            .code == 0);
  const Run diff = limitctl(store({"rules", "diff", second.path}));
  CHECK(diff.code == 0);
  CHECK_THAT(diff.out, Catch::Contains("\"added\":[\"cmb-day\"],\"removed\":[],"
                                       "\"changed\":[\"merchant-day\"]"));
  // A stale --expect-version: a conflict, exit 4, nothing stored.
  CHECK(limitctl(store({"rules", "apply", second.path, "--author", "bo", "--reason", "raise",
                        "--expect-version", "0"}))
            .code == 4);
  CHECK(limitctl(store({"rules", "apply", bad.path, "--author", "bo", "--reason", "x"})).code == 2);
  const Run applied = limitctl(store({"rules", "apply", second.path, "--author", "bo", "--reason",
                                      "raise", "--expect-version", "1"}));
  CHECK(applied.code == 0);
  CHECK_THAT(applied.out, Catch::Contains("\"version\":2"));

  const Run rolled =
      limitctl(store({"rules", "rollback", "1", "--author", "cy", "--reason", "oops"}));
  CHECK(rolled.code == 0);
  CHECK_THAT(rolled.out, Catch::Contains("\"version\":3"));
  const Run history = limitctl(store({"rules", "history", "--n", "2"}));
  CHECK(history.code == 0);
  CHECK_THAT(history.out, Catch::Contains("\"version\":3,"));
  CHECK_THAT(history.out,
             Catch::Contains("\"author\":\"cy\",\"action\":\"rollback:1\",\"reason\":\"oops\""));
  CHECK_THAT(history.out, Catch::Contains("\"version\":2,"));
  CHECK_THAT(history.out, !Catch::Contains("\"version\":1,"));
  CHECK(limitctl(store({"rules", "rollback", "9", "--author", "cy", "--reason", "x"})).code == 1);

  // One rule of the current version (3, the content of 1), then a version with no rules.
  const Run rule = limitctl(store({"rules", "get", "merchant-day"}));
  CHECK(rule.code == 0);
  CHECK_THAT(rule.out,
             Catch::Contains("name: merchant-day") && Catch::Contains("max_amount: 1000"));
  CHECK(limitctl(store({"rules", "get", "cmb-day"})).code == 1);
  const Run cleared = limitctl(store({"rules", "clear", "--author", "dd", "--reason", "pause"}));
  CHECK(cleared.code == 0);
  CHECK_THAT(cleared.out, Catch::Contains("\"version\":4"));
  CHECK(limitctl(store({"rules", "get", "merchant-day"})).code == 1);
  CHECK(limitctl(store({"rules", "clear", "--author", "dd"})).code == 2); // --reason required
}

TEST_CASE("limitctl shows control characters stored by other means escaped", "[limitctl][redis]") {
  const std::string prefix = unique_prefix() + "w:";
  limitcounter::WalletOptions options;
  options.key_prefix = prefix;
  Redis redis(test_options());
  limitcounter::Wallet wallet(redis, options);
  wallet.load("eve", {100, 1, 0});
  REQUIRE(wallet.freeze("eve", "chargeback"));
  // Then overwritten past the library, which refuses it: OSC (set the window title), CSI as
  // one C1 character and as a lone byte, a right-to-left override.
  const std::string hostile = "evil\x1b]0;owned\x07\xc2\x9b"
                              "2J\xe2\x80\xae\x9b";
  redis.command({"HSET", wallet.keys().account("eve"), "freeze_reason", hostile});
  const std::vector<std::string> show{"wallet", "show", "eve", "--prefix", prefix};

  const Run text = limitctl(show);
  CHECK(text.code == 0);
  CHECK_THAT(text.out,
             Catch::Contains("freeze_reason: evil\\x1b]0;owned\\x07\\u009b2J\\u202e\\x9b\n"));
  const Run json = limitctl({"wallet", "show", "eve", "--prefix", prefix, "--json"});
  CHECK(json.code == 0);
  CHECK_THAT(
      json.out,
      Catch::Contains("\"freeze_reason\":\"evil\\u001b]0;owned\\u0007\\u009b2J\\u202e\\ufffd\""));
  for (const Run* run : {&text, &json}) {
    for (const char* raw : {"\x1b", "\x07", "\x9b", "\xe2\x80\xae"}) {
      CHECK(run->out.find(raw) == std::string::npos);
    }
  }
}

TEST_CASE("limitctl without Redis: exit 2 without a URI, 3 when unreachable", "[limitctl][redis]") {
  const Run no_uri = limitctl({"usage", "channel", "Ali"}, false);
  CHECK(no_uri.code == 2);
  CHECK_THAT(no_uri.out, Catch::Contains("LIMITCOUNTER_REDIS_URI"));
  // Port 1: nothing listens there, the connection is refused.
  const Run unreachable =
      limitctl({"--uri", "redis://127.0.0.1:1", "usage", "channel", "Ali"}, false);
  CHECK(unreachable.code == 3);
  const Run help = limitctl({"--help"}, false);
  CHECK(help.code == 0);
  CHECK_THAT(help.out, Catch::Contains("Exit codes: 0 ok; 1 not found"));
}

TEST_CASE("limitctl takes the password from --password-file or the environment",
          "[limitctl][redis][secret][standalone]") {
  const std::string secret(known_secret);
  RedisServer server({"--requirepass", secret});
  const std::vector<std::string> usage{"--uri", server.uri(), "usage", "channel", "Ali"};
  const auto with = [&](std::vector<std::string> args) {
    args.insert(args.begin(), usage.begin(), usage.end());
    return args;
  };
  const TempFile file(secret + "\n"); // as `echo` writes it: the line break is not the password
  const TempFile wrong("wrong\n");
  const TempFile empty("");
  std::vector<Run> runs;
  runs.push_back(limitctl(usage, false));
  CHECK(runs.back().code == 3);
  CHECK_THAT(runs.back().out, Catch::Contains("requires authentication"));
  runs.push_back(limitctl(with({"--password-file", file.path}), false));
  CHECK(runs.back().code == 0);
  runs.push_back(limitctl(usage, false, {"LIMITCOUNTER_REDIS_PASSWORD=" + secret}));
  CHECK(runs.back().code == 0);
  runs.push_back(limitctl(usage, false, {"LIMITCOUNTER_REDIS_PASSWORD_FILE=" + file.path}));
  CHECK(runs.back().code == 0);
  // The file wins over the environment, which wins over the URI.
  runs.push_back(limitctl(with({"--password-file", wrong.path}), false,
                          {"LIMITCOUNTER_REDIS_PASSWORD=" + secret}));
  CHECK(runs.back().code == 3);
  CHECK_THAT(runs.back().out, Catch::Contains("WRONGPASS"));
  runs.push_back(limitctl({"--uri", "redis://:wrong@127.0.0.1:" + std::to_string(server.port()),
                           "usage", "channel", "Ali"},
                          false, {"LIMITCOUNTER_REDIS_PASSWORD=" + secret}));
  CHECK(runs.back().code == 0);
  runs.push_back(limitctl(with({"--password-file", "/nonexistent/password"}), false));
  CHECK(runs.back().code == 2);
  CHECK_THAT(runs.back().out, Catch::Contains("\"/nonexistent/password\" cannot be read"));
  runs.push_back(limitctl(with({"--password-file", empty.path}), false));
  CHECK(runs.back().code == 2);
  CHECK_THAT(runs.back().out, Catch::Contains("holds no password"));
  const Run help = limitctl({"--help"}, false);
  CHECK_THAT(help.out, Catch::Contains("--password-file") &&
                           Catch::Contains("LIMITCOUNTER_REDIS_PASSWORD") &&
                           Catch::Contains("ps shows"));
  for (const Run& run : runs) {
    INFO(run.out);
    CHECK_FALSE(shows_secret(run.out));
  }
}

TEST_CASE("limitctl shows no password: malformed URIs of every scheme, a server without AUTH",
          "[limitctl][redis][secret][standalone]") {
  const std::vector<std::string> usage{"usage", "channel", "Ali"};
  for (const std::string& uri : limitcounter::testing::malformed_uris_with_secret()) {
    INFO(uri);
    for (const Run& run : {limitctl({"--uri", uri, "usage", "channel", "Ali"}, false),
                           limitctl(usage, false, {"LIMITCOUNTER_REDIS_URI=" + uri})}) {
      INFO(run.out);
      CHECK(run.code == 2);
      CHECK_THAT(run.out, Catch::Contains("Redis URI"));
      CHECK_FALSE(shows_secret(run.out));
    }
  }
  // A server that does not know AUTH (renamed, a proxy) answers with the password it was sent.
  const std::string secret(known_secret);
  RedisServer server({"--rename-command", "AUTH", ""});
  const std::string address = "@127.0.0.1:" + std::to_string(server.port());
  const TempFile file(secret);
  for (const Run& run :
       {limitctl(usage, false, {"LIMITCOUNTER_REDIS_URI=redis://ops:" + secret + address}),
        limitctl(usage, false, {"LIMITCOUNTER_REDIS_URI=redis://:" + secret + address}),
        limitctl({"--uri", "redis://ops:" + address, "--password-file", file.path, "usage",
                  "channel", "Ali"},
                 false)}) {
    INFO(run.out);
    CHECK(run.code == 3);
    CHECK_THAT(run.out, Catch::Contains("AUTH") && Catch::Contains("ERR"));
    CHECK_FALSE(shows_secret(run.out));
  }
}
