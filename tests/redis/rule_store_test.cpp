// The shared rule store (include/limitcounter/rule_store.hpp) against a real Redis, standalone
// and (redis_on_cluster) a cluster.
#include <catch2/catch.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <limitcounter/limit_counter.hpp>
#include <limitcounter/rule_store.hpp>
#include <limitcounter/rules_file.hpp>

#include "support/probe.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"
#include "support/topology.hpp"

using namespace std::chrono_literals;
using limitcounter::Calendar;
using limitcounter::Decision;
using limitcounter::errc;
using limitcounter::Error;
using limitcounter::LimitCounter;
using limitcounter::LimitCounterOptions;
using limitcounter::Period;
using limitcounter::Redis;
using limitcounter::Rule;
using limitcounter::RuleChange;
using limitcounter::RuleFollower;
using limitcounter::RuleFollowerOptions;
using limitcounter::RuleSet;
using limitcounter::RuleStore;
using limitcounter::RuleStoreOptions;
using limitcounter::Transaction;
using limitcounter::testing::error_of;
using limitcounter::testing::eventually;
using limitcounter::testing::keys_matching;
using limitcounter::testing::test_options;
using limitcounter::testing::unique_prefix;

namespace {

RuleSet day_limit(std::int64_t max_count, const std::string& name = "merchant-day") {
  RuleSet rules;
  rules.add(Rule(name).where("merchant").per(Period::day).max_count(max_count));
  return rules;
}

// A store on a fresh prefix, and what its keys hold (the server's side of "nothing stored").
struct StoreFixture {
  std::string prefix = unique_prefix();
  Redis redis{test_options()};
  RuleStore store{redis, "router", RuleStoreOptions{prefix, 1000}};

  std::vector<std::string> keys() const { return keys_matching(prefix + "*"); }
};

const RuleChange alice{"alice", "first limits"};

} // namespace

TEST_CASE("rule store: versions increase by one and each keeps its set", "[rule_store]") {
  StoreFixture f;
  CHECK_FALSE(f.store.current());
  CHECK(f.store.current_version() == 0);
  CHECK(f.store.put(day_limit(10), alice) == 1);
  CHECK(f.store.put(day_limit(20), {"bob", "more"}) == 2);
  const auto current = f.store.current();
  REQUIRE(current);
  CHECK(current->version == 2);
  CHECK(current->author == "bob");
  CHECK(current->action == "put");
  CHECK(RuleStore::parse(*current).rules().at(0).max_count() == 20);
  const auto first = f.store.get(1);
  REQUIRE(first);
  CHECK(RuleStore::parse(*first).rules().at(0).max_count() == 10);
  CHECK_FALSE(f.store.get(3));
  // Every key of the store is in one slot: {router}.
  CHECK(f.keys() == std::vector<std::string>{
                        f.prefix + "rules:{router}:current", f.prefix + "rules:{router}:history",
                        f.prefix + "rules:{router}:v:1", f.prefix + "rules:{router}:v:2"});
}

TEST_CASE("rule store: history lists who, why and what, newest first", "[rule_store]") {
  StoreFixture f;
  f.store.put(day_limit(10), alice);
  f.store.put_rule(Rule("user-day").where("user").per(Period::day).max_amount(500),
                   {"bob", "users"});
  f.store.delete_rule("merchant-day", {"carol", "no merchant cap"});
  const auto history = f.store.history();
  REQUIRE(history.size() == 3);
  CHECK(history[0].version == 3);
  CHECK(history[0].author == "carol");
  CHECK(history[0].reason == "no merchant cap");
  CHECK(history[0].action == "delete_rule");
  CHECK(history[1].action == "put_rule");
  CHECK(history[1].author == "bob");
  CHECK(history[2].action == "put");
  CHECK(history[2].reason == "first limits");
  CHECK(history[0].yaml.empty());
  CHECK(history[0].at >= history[2].at);
  CHECK(f.store.history(1).size() == 1);
  const RuleSet now = RuleStore::parse(*f.store.current());
  REQUIRE(now.rules().size() == 1);
  CHECK(now.rules()[0].name() == "user-day");
}

TEST_CASE("rule store: put_rule replaces a rule of the same name", "[rule_store]") {
  StoreFixture f;
  f.store.put(day_limit(10), alice);
  CHECK(f.store.put_rule(Rule("merchant-day").where("merchant").per(Period::day).max_count(99),
                         {"bob", "raise"}) == 2);
  const RuleSet now = RuleStore::parse(*f.store.current());
  REQUIRE(now.rules().size() == 1);
  CHECK(now.rules()[0].max_count() == 99);
}

TEST_CASE("rule store: deleting an absent rule names it and stores nothing", "[rule_store]") {
  StoreFixture f;
  f.store.put(day_limit(10), alice);
  const Error e = error_of([&] { f.store.delete_rule("nope", alice); });
  CHECK(e.code() == errc::invalid_argument);
  CHECK_THAT(e.what(), Catch::Contains("\"nope\""));
  CHECK(f.store.current_version() == 1);
}

TEST_CASE("rule store: rollback stores the old content as a new version", "[rule_store]") {
  StoreFixture f;
  f.store.put(day_limit(10), alice);
  f.store.put(day_limit(20), alice);
  CHECK(f.store.rollback(1, {"dave", "20 was too many"}) == 3);
  const auto current = f.store.current();
  CHECK(current->action == "rollback:1");
  CHECK(current->yaml == f.store.get(1)->yaml);
  CHECK(RuleStore::parse(*current).rules().at(0).max_count() == 10);
  const Error e = error_of([&] { f.store.rollback(9, alice); });
  CHECK(e.code() == errc::not_found);
  CHECK_THAT(e.what(), Catch::Contains("version 9"));
  CHECK(f.store.current_version() == 3);
}

TEST_CASE("rule store: compare-and-set names both versions on a conflict", "[rule_store]") {
  StoreFixture f;
  CHECK(f.store.put(day_limit(10), alice, 0) == 1);
  CHECK(f.store.put(day_limit(20), alice, 1) == 2);
  const Error e = error_of([&] { f.store.put(day_limit(30), {"bob", "late"}, 1); });
  CHECK(e.code() == errc::conflict);
  CHECK_THAT(e.what(),
             Catch::Contains("expected version 1") && Catch::Contains("current version is 2"));
  CHECK(f.store.current_version() == 2);
  CHECK(RuleStore::parse(*f.store.current()).rules().at(0).max_count() == 20);
}

TEST_CASE("rule store: a retry of a stored compare-and-set returns the version it stored",
          "[rule_store]") {
  // The reply of the first put was lost (Outcome::unknown): the caller retries the same put.
  StoreFixture f;
  CHECK(f.store.put(day_limit(10), alice, 0) == 1);
  CHECK(f.store.put(day_limit(10), alice, 0) == 1);
  CHECK(f.store.history().size() == 1);
}

TEST_CASE("rule store: a set that does not validate is refused and nothing is stored",
          "[rule_store]") {
  StoreFixture f;
  f.store.put(day_limit(10), alice);
  const auto before = f.keys();
  const auto current_before = f.store.current();

  SECTION("bad YAML") {
    const Error e = error_of([&] {
      f.store.put_yaml("format: 1\nrules:\n  - name: x\n    where: [merchant]\n    per: fortnight\n"
                       "    max_count: 1\n",
                       alice);
    });
    CHECK(e.code() == errc::invalid_argument);
    CHECK_THAT(e.what(), Catch::Contains("fortnight"));
  }
  SECTION("a rule the set refuses") {
    const Error e = error_of([&] {
      f.store.put_rule(Rule("merchant-day-2").where("merchant").per(Period::day).max_count(5),
                       alice);
    });
    CHECK(e.code() == errc::invalid_argument);
  }
  SECTION("an author or reason with a control character") {
    const Error author = error_of([&] { f.store.put(day_limit(20), {"bo\x1b[2Jb", "raise"}); });
    CHECK(author.code() == errc::invalid_argument);
    CHECK_THAT(author.what(), Catch::Contains("rule change author \"bo\\x1b[2Jb\" contains a "
                                              "control character"));
    const Error reason = error_of([&] { f.store.put(day_limit(20), {"bob", "why\xc2\x9b"}); });
    CHECK_THAT(reason.what(), Catch::Contains("rule change reason \"why\\u009b\""));
  }
  SECTION("a text over the size limit") {
    const std::string huge(RuleStore::max_yaml_bytes + 1, '#');
    const Error e = error_of([&] { f.store.put_yaml(huge, alice); });
    CHECK(e.code() == errc::invalid_argument);
    CHECK_THAT(e.what(), Catch::Contains(std::to_string(huge.size())));
  }
  CHECK(f.keys() == before);
  CHECK(f.store.current_version() == 1);
  CHECK(f.store.current()->yaml == current_before->yaml);
  CHECK(f.store.history().size() == 1);
}

TEST_CASE("rule store: a bad name or option is refused naming it", "[rule_store]") {
  Redis redis(test_options());
  CHECK_THAT(error_of([&] { RuleStore(redis, "a{b}"); }).what(), Catch::Contains("a{b}"));
  CHECK_THAT(error_of([&] {
               RuleStore(redis, "r", RuleStoreOptions{"lc:", 0});
             }).what(),
             Catch::Contains("history_limit 0"));
}

TEST_CASE("rule store: the history keeps history_limit versions", "[rule_store]") {
  StoreFixture f;
  RuleStore small(f.redis, "small", RuleStoreOptions{f.prefix, 2});
  for (int i = 1; i <= 4; ++i) {
    small.put(day_limit(i), alice);
  }
  CHECK_FALSE(small.get(2)); // fell out with version 4
  CHECK(small.get(3));
  CHECK(small.get(4));
  CHECK(error_of([&] { small.rollback(1, alice); }).code() == errc::not_found);
  // The stream is trimmed exactly: history lists only versions that are still stored.
  const auto history = small.history(100);
  REQUIRE(history.size() == 2);
  CHECK(history[0].version == 4);
  CHECK(history[1].version == 3);
  for (const auto& entry : history) {
    CHECK(small.get(entry.version));
  }
  CHECK(f.redis.command({"XLEN", small.history_key()}).as_integer() == 2);
}

TEST_CASE("rule store: get_rule reads one rule of the current version", "[rule_store]") {
  StoreFixture f;
  CHECK_FALSE(f.store.get_rule("merchant-day")); // nothing stored
  f.store.put(day_limit(10), alice);
  f.store.put_rule(Rule("user-day").where("user").per(Period::day).max_amount(500), alice);
  const auto rule = f.store.get_rule("user-day");
  REQUIRE(rule);
  CHECK(rule->name() == "user-day");
  CHECK(rule->max_amount() == 500);
  CHECK(f.store.get_rule("merchant-day")->max_count() == 10);
  CHECK_FALSE(f.store.get_rule("nope"));
}

TEST_CASE("rule store: clear stores an empty set, the old one stays for rollback", "[rule_store]") {
  StoreFixture f;
  RuleSet rules({"merchant", "channel"});
  rules.add(Rule("merchant-day").where("merchant").per(Period::day).max_count(10));
  f.store.put(rules, alice);
  CHECK(f.store.clear({"bob", "pause every limit"}) == 2);
  const auto current = f.store.current();
  REQUIRE(current);
  CHECK(current->action == "clear");
  CHECK(current->author == "bob");
  const RuleSet cleared = RuleStore::parse(*current);
  CHECK(cleared.rules().empty());
  CHECK(cleared.attributes() == std::vector<std::string>{"merchant", "channel"});
  CHECK_FALSE(f.store.get_rule("merchant-day"));
  CHECK(f.store.history().size() == 2);
  CHECK(f.store.rollback(1, {"bob", "resume"}) == 3);
  CHECK(f.store.get_rule("merchant-day")->max_count() == 10);
  // An empty store gets a first, empty version.
  RuleStore fresh(f.redis, "fresh", RuleStoreOptions{f.prefix, 10});
  CHECK(fresh.clear(alice) == 1);
  CHECK(RuleStore::parse(*fresh.current()).rules().empty());
}

namespace {

// Two counters of one fleet (same keys), each deciding by the rules it was given.
struct FollowerFixture : StoreFixture {
  std::vector<std::shared_ptr<LimitCounter>> counters{make_counter(), make_counter()};

  std::shared_ptr<LimitCounter> make_counter() {
    LimitCounterOptions options;
    options.key_prefix = prefix + "lim:";
    return std::make_shared<LimitCounter>(redis, Calendar("Asia/Shanghai"), options);
  }
  bool all_on(std::uint64_t version) const {
    for (const auto& counter : counters) {
      if (counter->rule_set_version() != version) {
        return false;
      }
    }
    return true;
  }
};

Transaction payment(const std::string& id) {
  Transaction t;
  t.id = id;
  t.attributes = {{"merchant", "m1"}};
  t.amount = 100;
  return t;
}

} // namespace

TEST_CASE("rule follower: a put wakes it and both counters decide by the new version",
          "[rule_store][follower]") {
  FollowerFixture f;
  f.store.put(day_limit(1), alice);
  RuleFollowerOptions options;
  options.poll_interval = 1h; // only the notification (XREAD) can swap within the test
  RuleFollower follower(f.store, f.counters, options);
  CHECK(follower.version() == 1);
  REQUIRE(f.all_on(1));
  const Decision first = f.counters[0]->consume(payment("p1"));
  CHECK(first.allowed());
  CHECK(first.rule_set_version == 1);
  const Decision over = f.counters[1]->consume(payment("p2"));
  CHECK_FALSE(over.allowed()); // max_count 1
  CHECK(over.rule_set_version == 1);

  CHECK(f.store.put(day_limit(5), {"bob", "raise"}) == 2);
  REQUIRE(eventually([&] { return f.all_on(2); }));
  CHECK(follower.version() == 2);
  for (std::size_t i = 0; i < f.counters.size(); ++i) {
    const auto& counter = f.counters[i];
    const Decision decision = counter->consume(payment("p3-" + std::to_string(i)));
    CHECK(decision.allowed()); // max_count 5 now
    CHECK(decision.rule_set_version == 2);
    CHECK(counter->check(payment("p4")).rule_set_version == 2);
    CHECK(std::get<Decision>(counter->consume_many({payment("p5-" + std::to_string(i))}).at(0))
              .rule_set_version == 2);
  }
  // A replay reports the version in force now.
  CHECK(f.counters[0]->consume(payment("p1")).replayed);
  CHECK(f.counters[0]->consume(payment("p1")).rule_set_version == 2);
}

TEST_CASE("rule follower: without a notification it swaps on its poll", "[rule_store][follower]") {
  FollowerFixture f;
  f.store.put(day_limit(1), alice);
  RuleFollowerOptions options;
  options.poll_interval = 100ms;
  RuleFollower follower(f.store, f.counters, options);
  REQUIRE(f.all_on(1));
  // Version 2 written by hand, as a put whose XADD never reached the follower would leave it.
  const std::size_t entries = f.store.history().size();
  f.redis.command({"HSET", f.store.version_key(2), "yaml", limitcounter::to_yaml(day_limit(7)),
                   "author", "hand", "reason", "lost notification", "action", "put", "at", "0"});
  f.redis.command({"SET", f.store.current_key(), "2"});
  CHECK(eventually([&] { return f.all_on(2); }));
  CHECK(f.counters[0]->rules()->rules().at(0).max_count() == 7);
  CHECK(f.store.history().size() == entries); // no notification was sent
}

TEST_CASE("rule follower: a version that does not parse is skipped and reported",
          "[rule_store][follower]") {
  FollowerFixture f;
  f.store.put(day_limit(1), alice);
  std::mutex mutex;
  std::vector<std::string> errors;
  RuleFollowerOptions options;
  options.poll_interval = 100ms;
  options.on_error = [&](const Error& e) {
    const std::lock_guard<std::mutex> lock(mutex);
    errors.emplace_back(e.what());
  };
  RuleFollower follower(f.store, f.counters, options);
  f.redis.command({"HSET", f.store.version_key(2), "yaml", "rules: [", "author", "hand", "reason",
                   "broken", "action", "put", "at", "0"});
  f.redis.command({"SET", f.store.current_key(), "2"});
  REQUIRE(eventually([&] {
    const std::lock_guard<std::mutex> lock(mutex);
    return !errors.empty();
  }));
  {
    const std::lock_guard<std::mutex> lock(mutex);
    CHECK_THAT(errors.front(), Catch::Contains("version 2"));
  }
  CHECK(f.all_on(1));
  CHECK(follower.version() == 1);
  // The next good version is taken.
  CHECK(f.store.put(day_limit(3), alice) == 3);
  CHECK(eventually([&] { return f.all_on(3); }));
  const std::lock_guard<std::mutex> lock(mutex);
  CHECK(errors.size() == 1); // reported once, not at every poll
}

TEST_CASE("rule follower: refuses an empty store, a null counter and a zero poll interval",
          "[rule_store][follower]") {
  FollowerFixture f;
  CHECK(error_of([&] { RuleFollower(f.store, f.counters); }).code() == errc::not_found);
  CHECK(f.counters[0]->rule_set_version() == 0);
  f.store.put(day_limit(1), alice);
  CHECK(error_of([&] { RuleFollower(f.store, {nullptr}); }).code() == errc::invalid_argument);
  RuleFollowerOptions zero;
  zero.poll_interval = 0ms;
  CHECK_THAT(error_of([&] { RuleFollower(f.store, f.counters, zero); }).what(),
             Catch::Contains("poll_interval 0"));
}

TEST_CASE("a decision its failure policy made names the rule set version",
          "[rule_store][standalone]") {
  limitcounter::testing::RedisServer server;
  const auto options = server.options();
  server.kill(); // nothing is sent: the failure policy decides
  LimitCounter counter(Redis(options), Calendar("Asia/Shanghai"));
  RuleSet rules;
  rules.add(Rule("m")
                .where("merchant")
                .per(Period::day)
                .max_count(1)
                .on_redis_failure(limitcounter::FailurePolicy::allow));
  counter.set_rules(rules, 7);
  CHECK(counter.rule_set_version() == 7);
  const Decision decision = counter.consume(payment("degraded"));
  CHECK(decision.degraded);
  CHECK(decision.rule_set_version == 7);
  counter.set_rules(rules); // rules set in code: version 0
  CHECK(counter.consume(payment("degraded-2")).rule_set_version == 0);
}

namespace {

// `field` (e.g. "calls", "rejected_calls") of `command` in a node's INFO commandstats.
long long command_stat(const limitcounter::RedisOptions& node, const std::string& command,
                       const std::string& field) {
  const std::string stats = Redis(node).command({"INFO", "commandstats"}).as_string();
  const auto line = stats.find("cmdstat_" + command + ":");
  if (line == std::string::npos) {
    return 0;
  }
  const auto at = stats.find(field + "=", line);
  return at == std::string::npos ? 0 : std::stoll(stats.substr(at + field.size() + 1));
}

} // namespace

TEST_CASE("a follower's XREAD goes straight to the node of the history key",
          "[rule_store][router]") {
  if (!limitcounter::testing::on_cluster()) {
    SUCCEED("routing by key is a cluster matter");
    return;
  }
  std::vector<limitcounter::RedisOptions> nodes;
  for (const auto* node : limitcounter::testing::shared_cluster().nodes()) {
    nodes.push_back(node->options());
  }
  // A node answers MOVED for a key it does not serve.
  const auto owner = [&](const std::string& key) {
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (!Redis(nodes[i]).command({"EXISTS", key}).is_error()) {
        return i;
      }
    }
    FAIL("no node serves " << key);
    return nodes.size();
  };
  // A store whose history key is not on the node of the slot of "BLOCK", where routing by
  // argv[1] sent the XREAD.
  const std::string prefix = unique_prefix();
  std::string history;
  for (int i = 0; history.empty() || owner(history) == owner("BLOCK"); ++i) {
    history = RuleStore(Redis(test_options()), "r" + std::to_string(i), {prefix, 10}).history_key();
  }
  const auto rejected = [&] {
    long long total = 0;
    for (const auto& node : nodes) {
      total += command_stat(node, "xread", "rejected_calls");
    }
    return total;
  };
  const std::vector<std::string> xread{"XREAD", "BLOCK", "1", "STREAMS", history, "0-0"};
  // The measure sees a misrouted XREAD: the node of "BLOCK" refuses it with MOVED.
  const long long before_misrouted = rejected();
  CHECK(Redis(nodes[owner("BLOCK")]).command(xread).is_error());
  REQUIRE(rejected() == before_misrouted + 1);

  const long long rejected_before = rejected();
  const long long calls_before = command_stat(nodes[owner(history)], "xread", "calls");
  CHECK(Redis(test_options()).command(xread).is_nil()); // no entry: the block times out
  CHECK(rejected() == rejected_before);
  CHECK(command_stat(nodes[owner(history)], "xread", "calls") == calls_before + 1);
}

#ifdef LIMITCOUNTER_RULE_FOLLOWER_PROBE
extern char** environ;

namespace {

// The URI of the test topology, for a process of its own.
std::string uri_of(const limitcounter::RedisOptions& options) {
  if (options.cluster_seeds.empty()) {
    return "redis://" + options.host + ":" + std::to_string(options.port);
  }
  std::string uri = "redis-cluster://";
  for (const auto& seed : options.cluster_seeds) {
    uri += (uri.back() == '/' ? "" : ",") + seed;
  }
  return uri;
}

// One rule_follower_probe process: its stdout read through a pipe, killed by pid at the end.
class ProbeProcess {
public:
  explicit ProbeProcess(std::vector<std::string> args) {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    posix_spawn_file_actions_addclose(&actions, fds[1]);
    args.insert(args.begin(), LIMITCOUNTER_RULE_FOLLOWER_PROBE);
    std::vector<char*> argv;
    for (auto& arg : args) {
      argv.push_back(arg.data());
    }
    argv.push_back(nullptr);
    const int spawned = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    fd_ = fds[0];
    REQUIRE(spawned == 0);
    fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
  }
  ~ProbeProcess() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    close(fd_);
  }
  ProbeProcess(const ProbeProcess&) = delete;
  ProbeProcess& operator=(const ProbeProcess&) = delete;

  /// Whether the process printed `line` so far (reads what is there, waits at most 10 ms).
  bool printed(const std::string& line) {
    pollfd ready{fd_, POLLIN, 0};
    if (poll(&ready, 1, 10) > 0) {
      char buffer[512];
      const ssize_t n = read(fd_, buffer, sizeof buffer);
      if (n > 0) {
        output_.append(buffer, static_cast<std::size_t>(n));
      }
    }
    return output_.find(line + "\n") != std::string::npos;
  }
  const std::string& output() const { return output_; }

private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string output_;
};

} // namespace

TEST_CASE("rule follower: two processes switch to a new version", "[rule_store][follower]") {
  StoreFixture f;
  f.store.put(day_limit(1), alice);
  const auto poll_interval = 1000ms;
  const std::vector<std::string> args{uri_of(test_options()), f.prefix, "router",
                                      std::to_string(poll_interval.count())};
  ProbeProcess first(args);
  ProbeProcess second(args);
  // Both follow version 1 before version 2 is put.
  const auto wait_for = [&](const std::string& line, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    bool both = false;
    while (!both && std::chrono::steady_clock::now() < deadline) {
      both = first.printed(line) & second.printed(line); // (both read, no short cut)
    }
    return both;
  };
  REQUIRE(wait_for("version 1", 60s));
  CHECK(f.store.put(day_limit(2), {"bob", "fleet"}) == 2);
  // The documented bound is poll_interval + command_timeout; the deadline is 20 times that so
  // that a loaded machine does not fail the test (no duration is asserted).
  const auto bound = poll_interval + test_options().command_timeout;
  const bool switched = wait_for("version 2", 20 * bound);
  INFO("first: " << first.output() << "second: " << second.output());
  CHECK(switched);
}
#endif
