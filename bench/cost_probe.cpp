// What Redis spends on a limits transaction, measured from the server's side with public API
// only, so that scripts/bench.sh --baseline REV builds this same file against an earlier
// revision of the library and prints both in one run (issue 14: "before and after, in one run").
//
//   cost_probe <redis uri> <build label>
//              [--server-instructions [<reference script> [<consume floor script>
//                                      [<least consume floor script>]]]]
//
// On an empty server of its own (bench.sh flushes it before each build's probe): every key
// has the default prefix, as a host's would.
// Prints JSON lines: record bytes (MEMORY USAGE of a transaction's record key, mean of 50, ids of
// 17 characters), used_memory per 4-rule transaction of a distinct user (2,048 of them), and
// Redis CPU (INFO cpu) and script time (INFO commandstats) per decision of consume_many in
// batches of 64 and of single consumes, the least of 3 rounds (a pause of the machine only adds
// time). Exits non-zero if a decision that must be allowed is not: a probe of failing calls
// measures nothing.
// Each measured round starts with CONFIG RESETSTAT and ends with ECHO: with
// --server-instructions (the server runs under callgrind, see bench.sh --server-instructions)
// only the decision rounds run (batches of 1 and 4 rules, then single 1-rule consumes, 3 rounds
// each), and callgrind's dump at each ECHO holds what the server executed for that round and
// nothing else. A reference script (bench/lua/reference_gcra.lua: a record-less limiter) adds
// 3 rounds of as many decisions, one call each, after them; a consume floor script
// (bench/lua/consume_floor.lua: only the commands of a lone consume) 3 more; a least consume
// floor script (bench/lua/least_consume_floor.lua: those commands under the least contract) 3
// more.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <limitcounter/limitcounter.hpp>

namespace lc = limitcounter;

namespace {

constexpr int batch_size = 64;
constexpr int round_transactions = 30 * batch_size; // a measured round's decisions

struct Probe {
  lc::Redis redis;
  std::uint64_t next_id = 0;

  // The bench's rules: `count` rules over merchant, dept, channel and user, per day and month.
  static lc::RuleSet rules(int count) {
    static const char* const shapes[] = {"merchant", "dept", "channel", "user"};
    lc::RuleSet set;
    for (int r = 0; r < count; ++r) {
      set.add(lc::Rule("r" + std::to_string(r))
                  .where(shapes[r % 4])
                  .per(r < 4 ? lc::Period::day : lc::Period::month)
                  .max_amount(1'000'000'000'000));
    }
    return set;
  }
  // A 17-character id and the bench's short dimension values.
  lc::Transaction payment(std::int64_t amount, const std::string& user = "u1") {
    char id[24];
    std::snprintf(id, sizeof id, "pay-%013llu", static_cast<unsigned long long>(next_id++));
    return {id,
            {{"merchant", "m" + std::to_string(next_id % 50)},
             {"dept", "cmb"},
             {"channel", "Ali"},
             {"user", user}},
            amount,
            lc::Clock::now()};
  }
  long long memory(const std::string& key) {
    const lc::Reply used = redis.command({"MEMORY", "USAGE", key, "SAMPLES", "0"});
    return used.is_nil() ? 0 : used.as_integer();
  }
  double info_number(const char* section, const char* name) {
    const std::string info = redis.command({"INFO", section}).as_string();
    const auto at = info.find(name);
    if (at == std::string::npos) {
      throw std::runtime_error(std::string("INFO ") + section + " has no " + name);
    }
    return std::stod(info.substr(at + std::strlen(name)));
  }
  // Script time (EVALSHA and FCALL) since CONFIG RESETSTAT (INFO commandstats), in µs. (Kept
  // in this file, which scripts/bench.sh --baseline builds against earlier revisions too.)
  double script_usec() {
    const std::string stats = redis.command({"INFO", "commandstats"}).as_string();
    double usec = 0;
    bool found = false;
    for (const char* command : {"cmdstat_evalsha:", "cmdstat_fcall:"}) {
      const auto line = stats.find(command);
      if (line != std::string::npos) {
        usec += std::stod(stats.substr(stats.find("usec=", line) + 5));
        found = true;
      }
    }
    if (!found) {
      throw std::runtime_error("INFO commandstats counts no EVALSHA or FCALL");
    }
    return usec;
  }
  double cpu_usec() {
    return (info_number("cpu", "used_cpu_sys:") + info_number("cpu", "used_cpu_user:")) * 1e6;
  }
};

void require_allowed(const lc::Decision& decision, const char* what) {
  if (!decision.allowed()) {
    throw std::runtime_error(std::string(what) + ": a decision that must be allowed was denied");
  }
}

// Mean record bytes of 50 transactions: `step` 0 consumes, 1 consumes over a limit (denied: the
// rules of `limits` must deny an amount of 100), 2 reserves, 3 consumes and refunds in full.
double record_bytes(Probe& probe, lc::LimitCounter& limits, int step) {
  long long total = 0;
  for (int i = 0; i < 50; ++i) {
    const lc::Transaction paid = probe.payment(100);
    if (step == 2) {
      require_allowed(limits.reserve(paid), "reserve");
    } else if (step == 1) {
      if (limits.consume(paid).allowed()) {
        throw std::runtime_error("record_bytes: a consume over the limit was allowed");
      }
    } else {
      require_allowed(limits.consume(paid), "consume");
    }
    if (step == 3) {
      limits.refund(paid.id);
    }
    total += probe.memory(limits.keys().transaction(paid.id));
  }
  return static_cast<double>(total) / 50;
}

// Redis CPU and script time per decision: `batched` consume_many of 64, else single consumes.
void decision_cost(Probe& probe, lc::LimitCounter& limits, bool batched, double& cpu,
                   double& script) {
  cpu = script = 1e9;
  for (int round = 0; round < 3; ++round) {
    std::vector<lc::Transaction> transactions;
    for (int i = 0; i < round_transactions; ++i) {
      transactions.push_back(probe.payment(100));
    }
    probe.redis.command({"CONFIG", "RESETSTAT"});
    const double before = probe.cpu_usec();
    if (batched) {
      for (std::size_t at = 0; at < transactions.size(); at += batch_size) {
        const std::vector<lc::Transaction> one(transactions.begin() + static_cast<long>(at),
                                               transactions.begin() +
                                                   static_cast<long>(at + batch_size));
        for (const auto& result : limits.consume_many(one)) {
          if (const auto* error = std::get_if<lc::Error>(&result)) {
            throw *error;
          }
          require_allowed(std::get<lc::Decision>(result), "consume_many");
        }
      }
    } else {
      for (const auto& transaction : transactions) {
        require_allowed(limits.consume(transaction), "consume");
      }
    }
    const double used = probe.cpu_usec() - before;
    probe.redis.command({"ECHO", "round end"});
    const double decisions = static_cast<double>(transactions.size());
    cpu = std::min(cpu, used / decisions);
    script = std::min(script, probe.script_usec() / decisions);
  }
}

// The text of the script at `path`.
std::string script_source(const char* path) {
  std::ifstream file(path);
  std::string source((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (source.empty()) {
    throw std::runtime_error(std::string("cannot read ") + path);
  }
  return source;
}

// 3 rounds of `round_transactions` calls `call(i)` (i counts on across rounds), each round
// between CONFIG RESETSTAT and ECHO, as decision_cost's.
template <typename Call> void script_rounds(Probe& probe, Call call) {
  int i = 0;
  for (int round = 0; round < 3; ++round) {
    probe.redis.command({"CONFIG", "RESETSTAT"});
    for (int k = 0; k < round_transactions; ++k) {
      call(i++);
    }
    probe.redis.command({"ECHO", "round end"});
  }
}

// Rounds of the record-less limiter in `path` (its contract: bench/lua/reference_gcra.lua), one
// call a decision, over 50 subjects as the probe's 50 merchants.
void reference_rounds(Probe& probe, const char* path) {
  const std::string sha = probe.redis.command({"SCRIPT", "LOAD", script_source(path)}).as_string();
  script_rounds(probe, [&](int i) {
    // 1 ms apart, a burst of 10^12 ms: never denied
    const lc::Reply reply = probe.redis.command(
        {"EVALSHA", sha, "1", "gcra:m" + std::to_string(i % 50), "1", "1000000000000"});
    if (reply.as_array().at(0).as_integer() != 1) {
      throw std::runtime_error("reference limiter: a request was not allowed");
    }
  });
}

// Rounds of a consume floor script in `path` (bench/lua/consume_floor.lua and
// least_consume_floor.lua), called as the library's scripts are, by FCALL of function `name` of
// a library of its own, with the keys and arguments `arguments(i, id, fingerprint)` gives: shaped
// as the probe's own single consumes send them (a 17-character id, `id_prefix` and 13 digits, the
// default key prefix, a counter hash of 50 merchants' fields, an 11-character fingerprint).
template <typename Arguments>
void floor_rounds(Probe& probe, const char* path, const std::string& name, const char* id_prefix,
                  Arguments arguments) {
  probe.redis.command({"FUNCTION", "LOAD", "REPLACE",
                       "#!lua name=" + name + "\nredis.register_function('" + name +
                           "', function(KEYS, ARGV)\n" + script_source(path) + "\nend)\n"});
  script_rounds(probe, [&](int i) {
    char id[24];
    char fingerprint[16];
    std::snprintf(id, sizeof id, "%s%013d", id_prefix, i);
    std::snprintf(fingerprint, sizeof fingerprint, "f%010d", i);
    std::vector<std::string> argv{"FCALL", name};
    for (std::string& argument : arguments(i, std::string(id), std::string(fingerprint))) {
      argv.push_back(std::move(argument));
    }
    if (probe.redis.command(argv).as_array().at(0).as_integer() != 1) {
      throw std::runtime_error(name + ": a record was there before");
    }
  });
}

constexpr const char* floor_counter = "trans:limit:{floor001}:day:20261128";

// The floors' counter set: one counter, its hold set.
std::string floor_set_text() {
  return "1 4102444800000\n" + std::string(floor_counter) + " 1\n" + floor_counter + ":holds";
}

// The consume floor: op one's 4 keys and 10 arguments.
void consume_floor_rounds(Probe& probe, const char* path) {
  const std::string now = std::to_string(
      std::chrono::duration_cast<std::chrono::milliseconds>(lc::Clock::now().time_since_epoch())
          .count());
  floor_rounds(probe, path, "consume_floor", "flr-",
               [&](int i, const std::string& id, const std::string& fingerprint) {
                 return std::vector<std::string>{"4",
                                                 "trans:limit:tx:{" + id + "}",
                                                 "trans:limit:cs:floor001",
                                                 floor_counter,
                                                 std::string(floor_counter) + ":holds",
                                                 "one",
                                                 now,
                                                 "86400000",
                                                 std::string(21, 'p'),
                                                 "r0",
                                                 "floor001",
                                                 floor_set_text(),
                                                 fingerprint,
                                                 "100",
                                                 "m" + std::to_string(i % 50)};
               });
}

// The least consume floor: 3 keys and 4 arguments, the record lifetime first in the set's text.
void least_consume_floor_rounds(Probe& probe, const char* path) {
  floor_rounds(probe, path, "least_consume_floor", "lst-",
               [&](int i, const std::string& id, const std::string& fingerprint) {
                 return std::vector<std::string>{
                     "3",           "trans:limit:tx:{" + id + "}",  "trans:limit:cs:floor001",
                     floor_counter, "86400000 " + floor_set_text(), fingerprint,
                     "100",         "m" + std::to_string(i % 50)};
               });
}

} // namespace

int main(int argc, char** argv) {
  const bool instructions =
      argc >= 4 && argc <= 7 && std::strcmp(argv[3], "--server-instructions") == 0;
  if (argc != 3 && !instructions) {
    std::fprintf(stderr,
                 "usage: %s <redis uri> <build label>\n"
                 "       [--server-instructions [<reference script> [<consume floor script>\n"
                 "                               [<least consume floor script>]]]]\n",
                 argv[0]);
    return 2;
  }
  const std::string label = argv[2];
  try {
    lc::RedisOptions options = lc::RedisOptions::from_uri(argv[1]);
    if (instructions) { // (a batch under callgrind takes ~100 times as long)
      options.command_timeout = std::chrono::seconds(30);
    }
    Probe probe{lc::Redis(options)};
    const lc::Calendar calendar("Asia/Shanghai");
    lc::LimitCounter one_rule(probe.redis, calendar, lc::LimitCounterOptions{});
    one_rule.set_rules(Probe::rules(1));
    lc::LimitCounter four_rules(probe.redis, calendar, lc::LimitCounterOptions{});
    four_rules.set_rules(Probe::rules(4));
    if (instructions) {
      double cpu[3]; // (callgrind's dumps are what counts here)
      double script[3];
      decision_cost(probe, one_rule, true, cpu[0], script[0]);
      decision_cost(probe, four_rules, true, cpu[1], script[1]);
      decision_cost(probe, one_rule, false, cpu[2], script[2]);
      if (argc >= 5) {
        reference_rounds(probe, argv[4]);
      }
      if (argc >= 6) {
        consume_floor_rounds(probe, argv[5]);
      }
      if (argc == 7) {
        least_consume_floor_rounds(probe, argv[6]);
      }
      std::printf("{\"build\": \"%s\", \"row\": \"server_instructions\", "
                  "\"rounds\": %d, \"decisions_per_round\": %d}\n",
                  label.c_str(), 9 + 3 * (argc - 4), round_transactions);
      return 0;
    }
    // 3 of the rules and a 4th that denies 100 (a user's 50 a day), as bench.cpp's record_bytes
    lc::LimitCounter tight(probe.redis, calendar, lc::LimitCounterOptions{});
    tight.set_rules(
        Probe::rules(3).add(lc::Rule("tight").where("user").per(lc::Period::day).max_amount(50)));
    std::printf("{\"build\": \"%s\", \"row\": \"record_bytes\", \"consumed_1_rule\": %.1f, "
                "\"consumed_4_rules\": %.1f, \"denied_4_rules\": %.1f, \"reserved_4_rules\": "
                "%.1f, \"refunded_4_rules\": %.1f}\n",
                label.c_str(), record_bytes(probe, one_rule, 0), record_bytes(probe, four_rules, 0),
                record_bytes(probe, tight, 1), record_bytes(probe, four_rules, 2),
                record_bytes(probe, four_rules, 3));

    // every key a transaction of a user seen once adds: its record, its user's counter fields
    lc::LimitCounter distinct(probe.redis, calendar, lc::LimitCounterOptions{});
    distinct.set_rules(Probe::rules(4));
    const double before = probe.info_number("memory", "used_memory:");
    constexpr int users = 32 * batch_size;
    for (int b = 0; b < users / batch_size; ++b) {
      std::vector<lc::Transaction> transactions;
      for (int k = 0; k < batch_size; ++k) {
        transactions.push_back(probe.payment(100, "user" + std::to_string(b * batch_size + k)));
      }
      for (const auto& result : distinct.consume_many(transactions)) {
        if (const auto* error = std::get_if<lc::Error>(&result)) {
          throw *error;
        }
      }
    }
    std::printf("{\"build\": \"%s\", \"row\": \"used_memory_per_tx_distinct_users\", "
                "\"bytes\": %.1f}\n",
                label.c_str(), (probe.info_number("memory", "used_memory:") - before) / users);

    for (const bool batched : {true, false}) {
      double cpu[2];
      double script[2];
      decision_cost(probe, one_rule, batched, cpu[0], script[0]);
      decision_cost(probe, four_rules, batched, cpu[1], script[1]);
      std::printf("{\"build\": \"%s\", \"row\": \"%s\", \"cpu_usec_1_rule\": %.2f, "
                  "\"cpu_usec_4_rules\": %.2f, \"script_usec_1_rule\": %.2f, "
                  "\"script_usec_4_rules\": %.2f}\n",
                  label.c_str(), batched ? "server_cost_batch64" : "server_cost_single", cpu[0],
                  cpu[1], script[0], script[1]);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cost_probe (%s): %s\n", label.c_str(), e.what());
    return 1;
  }
  return 0;
}
