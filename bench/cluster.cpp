#include "cluster.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <memory>
#include <stdexcept>
#include <thread>
#include <variant>
#include <vector>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/limitcounter.hpp>

#include "driver.hpp"
#include "redis/key_slot.hpp"

namespace bench {
namespace {

namespace lc = limitcounter;

constexpr int rounds = 3;
constexpr int cost_decisions = 3072; // 48 batches of 64
// The bucketed layout's scenario: one shape's dimensions over this many slots
// (`LimitCounterOptions::counter_buckets`), 16 or more per master up to 4 masters.
constexpr std::uint32_t bucket_count = 64;

// Four shapes whose hash tags land on three different masters of a 3-master cluster (and
// two by two on 2 masters): {merchant} slot 3791, {dept} 5618, {channel} 10328, {card} 11340.
const char* const four_shapes[] = {"merchant", "dept", "channel", "card"};
const lc::Period one_shape_periods[] = {lc::Period::day, lc::Period::month, lc::Period::hour,
                                        lc::Period::minute};

constexpr std::int64_t unlimited = 1'000'000'000'000'000;

lc::RuleSet rules_of_four_shapes() {
  lc::RuleSet rules;
  for (const char* shape : four_shapes) {
    rules.add(lc::Rule(std::string(shape) + "_day")
                  .where(shape)
                  .per(lc::Period::day)
                  .max_amount(unlimited));
  }
  return rules;
}

lc::RuleSet rules_of_one_rule() {
  lc::RuleSet rules;
  rules.add(lc::Rule("merchant_day").where("merchant").per(lc::Period::day).max_amount(unlimited));
  return rules;
}

lc::RuleSet rules_of_one_shape() {
  lc::RuleSet rules;
  for (const lc::Period period : one_shape_periods) {
    rules.add(lc::Rule("merchant_" + std::string(lc::to_string(period)))
                  .where("merchant")
                  .per(period)
                  .max_amount(unlimited));
  }
  return rules;
}

// A server the scenarios run on: the library's connection to it, a LimitCounter with one
// bucket per counter and one with `bucket_count` (own key prefix), and one direct connection
// per master for INFO and CONFIG RESETSTAT.
struct Target {
  std::string name;
  std::unique_ptr<lc::Redis> redis;
  std::unique_ptr<lc::LimitCounter> limits;
  std::unique_ptr<lc::LimitCounter> bucketed;
  std::vector<std::unique_ptr<lc::Redis>> masters;
  std::vector<std::string> master_names;
};

Target make_target(const std::string& name, const std::string& uri, const std::string& nonce,
                   int threads) {
  Target target;
  target.name = name;
  lc::RedisOptions options = lc::RedisOptions::from_uri(uri);
  options.command_timeout = std::chrono::milliseconds{2000};
  options.pool_size = static_cast<std::size_t>(threads) * 2;
  target.redis = std::make_unique<lc::Redis>(options);
  lc::LimitCounterOptions counter_options;
  counter_options.key_prefix = "bench:" + nonce + ":";
  target.limits = std::make_unique<lc::LimitCounter>(*target.redis, lc::Calendar("Asia/Shanghai"),
                                                     counter_options);
  counter_options.key_prefix += "b" + std::to_string(bucket_count) + ":";
  counter_options.counter_buckets = bucket_count;
  target.bucketed = std::make_unique<lc::LimitCounter>(*target.redis, lc::Calendar("Asia/Shanghai"),
                                                       counter_options);
  std::vector<std::string> addresses = options.cluster_seeds;
  if (addresses.empty()) {
    addresses.push_back(options.host + ":" + std::to_string(options.port));
  }
  for (const auto& address : addresses) {
    auto node = std::make_unique<lc::Redis>("redis://" + address);
    // Loaded beforehand so that the measured calls are script calls only (no NOSCRIPT, no
    // "Function not found", no load).
    for (const auto& script : lc::scripts::all) {
      node->command({"SCRIPT", "LOAD", std::string(script->source)});
      if (!script->library.empty()) {
        node->command({"FUNCTION", "LOAD", std::string(script->library)}); // (or loaded before)
      }
    }
    target.masters.push_back(std::move(node));
    target.master_names.push_back(address);
  }
  return target;
}

// A scenario: its rules, the number of merchants its transactions cycle through, and whether
// it runs on the bucketed LimitCounter.
struct Scenario {
  std::string name;
  lc::RuleSet rules;
  std::uint64_t merchants;
  bool bucketed;

  lc::LimitCounter& counter(Target& target) const {
    return bucketed ? *target.bucketed : *target.limits;
  }
};

lc::Transaction transaction(const Scenario& scenario, const std::string& id, std::uint64_t i) {
  lc::Transaction tx;
  tx.id = id;
  tx.attributes = {{"merchant", "m" + std::to_string(i % scenario.merchants)},
                   {"dept", "cmb"},
                   {"channel", "Ali"},
                   {"card", "c" + std::to_string(i % 1000)}};
  tx.amount = 100;
  return tx;
}

// Unique transaction ids across targets, rounds and threads of one run.
std::string transaction_id(const std::string& nonce, std::uint64_t run, int thread,
                           std::uint64_t i) {
  return "c" + nonce.substr(nonce.size() - 6) + "-" + std::to_string(run) + "-" +
         std::to_string(thread) + "-" + std::to_string(i);
}

struct ComparisonRow {
  std::string scenario;
  Measurement standalone;
  Measurement cluster;
};

struct Comparison {
  Target& standalone;
  Target& cluster;
  std::string nonce;
  std::chrono::milliseconds duration;
  int threads;
  std::uint64_t runs = 0;
  std::vector<ComparisonRow> rows;

  // One round: `thread_count` threads of single consumes, or with `batch` > 1 one thread of
  // `consume_many` calls of `batch` transactions each.
  Measurement once(const Scenario& scenario, Target& target, int thread_count, int batch) {
    const std::uint64_t run = ++runs;
    lc::LimitCounter& limits = scenario.counter(target);
    if (batch == 1) {
      return measure(thread_count, duration / rounds, 1, [&](int t, std::uint64_t i) {
        limits.consume(transaction(scenario, transaction_id(nonce, run, t, i), i));
      });
    }
    return measure(1, duration / rounds, batch, [&](int t, std::uint64_t i) {
      std::vector<lc::Transaction> transactions;
      for (std::uint64_t k = i * batch; k < (i + 1) * batch; ++k) {
        transactions.push_back(transaction(scenario, transaction_id(nonce, run, t, k), k));
      }
      for (const auto& result : limits.consume_many(transactions)) {
        if (const auto* error = std::get_if<lc::Error>(&result)) {
          throw *error; // as `consume` would
        }
      }
    });
  }

  // The two targets take turns, `rounds` times each; the best round of each counts, as in
  // the standalone table, so that a pause of this shared machine hurts neither more.
  void compare(const Scenario& scenario) {
    scenario.counter(standalone).set_rules(scenario.rules);
    scenario.counter(cluster).set_rules(scenario.rules);
    const struct {
      const char* suffix;
      int threads;
      int batch;
    } modes[] = {
        {"_sync", 1, 1}, {"_threads", threads, 1}, {"_threads64", 64, 1}, {"_batch64", 1, 64}};
    for (const auto& mode : modes) {
      ComparisonRow best{scenario.name + mode.suffix, {}, {}};
      for (int round = 0; round < rounds; ++round) {
        const Measurement alone = once(scenario, standalone, mode.threads, mode.batch);
        const Measurement spread = once(scenario, cluster, mode.threads, mode.batch);
        best.standalone = alone.ops_per_s > best.standalone.ops_per_s ? alone : best.standalone;
        best.cluster = spread.ops_per_s > best.cluster.ops_per_s ? spread : best.cluster;
      }
      rows.push_back(best);
    }
  }
};

void print_comparison(const std::vector<ComparisonRow>& rows) {
  std::printf("%-28s %13s %8s %8s %13s %8s %8s %7s\n", "scenario", "standalone/s", "p50 us",
              "p99 us", "cluster/s", "p50 us", "p99 us", "ratio");
  for (const auto& row : rows) {
    std::printf("%-28s %13.0f %8.1f %8.1f %13.0f %8.1f %8.1f %7.3f\n", row.scenario.c_str(),
                row.standalone.ops_per_s, row.standalone.p50_us, row.standalone.p99_us,
                row.cluster.ops_per_s, row.cluster.p50_us, row.cluster.p99_us,
                row.cluster.ops_per_s / row.standalone.ops_per_s);
  }
}

// A number after `field` in an INFO text (0 when the field is absent).
double info_number(const std::string& info, const std::string& field) {
  const auto at = info.find(field);
  return at == std::string::npos ? 0 : std::stod(info.substr(at + field.size()));
}

struct NodeCost {
  double script_calls = 0; // EVALSHA and FCALL
  double script_usec = 0;
  double cpu_usec = 0; // used_cpu_user + used_cpu_sys
};

NodeCost read_cost(lc::Redis& node) {
  const bench::ScriptStats scripts =
      bench::script_stats(node.command({"INFO", "commandstats"}).as_string());
  const std::string cpu = node.command({"INFO", "cpu"}).as_string();
  NodeCost cost;
  cost.script_calls = scripts.calls;
  cost.script_usec = scripts.usec;
  cost.cpu_usec =
      (info_number(cpu, "used_cpu_user:") + info_number(cpu, "used_cpu_sys:")) * 1'000'000;
  return cost;
}

// The master serving `slot`, as an index into `target.masters` (CLUSTER SLOTS names the owner).
std::size_t master_of(const Target& target, const lc::Reply& slots, long long slot) {
  for (const lc::Reply& range : slots.as_array()) {
    if (range.at(0).as_integer() > slot || slot > range.at(1).as_integer()) {
      continue;
    }
    const std::string owner =
        range.at(2).at(0).as_string() + ":" + std::to_string(range.at(2).at(1).as_integer());
    const auto at = std::find(target.master_names.begin(), target.master_names.end(), owner);
    if (at != target.master_names.end()) {
      return static_cast<std::size_t>(at - target.master_names.begin());
    }
  }
  throw std::runtime_error("no master of the seeds serves slot " + std::to_string(slot));
}

// The counter slots of a scenario each master serves ("all" on a standalone server): the
// counters' tags with one bucket, how many of each counter's buckets with several.
std::vector<std::string> slots_per_master(Target& target, const Scenario& scenario) {
  std::vector<std::string> served(target.masters.size());
  if (!target.redis->is_cluster()) {
    served[0] = "all";
    return served;
  }
  const lc::Reply slots = target.masters.front()->command({"CLUSTER", "SLOTS"});
  const lc::CounterKeys& keys = scenario.counter(target).keys();
  std::vector<std::string> counters;
  for (const auto& rule : scenario.rules.rules()) {
    if (std::find(counters.begin(), counters.end(), rule.counter_name()) == counters.end()) {
      counters.push_back(rule.counter_name());
    }
  }
  for (const auto& counter : counters) {
    std::vector<std::uint32_t> buckets(target.masters.size(), 0);
    for (std::uint32_t bucket = 0; bucket < keys.buckets(); ++bucket) {
      const auto slot =
          lc::detail::key_slot(lc::CounterKeys::slot_tag(keys.bucket_tag(counter, bucket)));
      ++buckets[master_of(target, slots, slot)];
    }
    for (std::size_t m = 0; m < served.size(); ++m) {
      if (buckets[m] == 0) {
        continue;
      }
      served[m] += served[m].empty() ? "" : ",";
      served[m] += keys.buckets() == 1
                       ? "{" + counter + "}"
                       : std::to_string(buckets[m]) + "/" + std::to_string(keys.buckets()) +
                             " {<b>:" + counter + "}";
    }
  }
  return served;
}

void print_cost_row(const std::string& scenario, const std::string& target,
                    const std::string& master, const std::string& served, const NodeCost& cost) {
  std::printf("%-25s %-11s %-21s %-38s %8.2f %10.1f %10.1f\n", scenario.c_str(), target.c_str(),
              master.c_str(), served.c_str(), cost.script_calls, cost.script_usec, cost.cpu_usec);
}

// What each master spends per decision: script calls (EVALSHA and FCALL) and their usec (INFO
// commandstats, after CONFIG RESETSTAT), and its process CPU time (used_cpu_user + used_cpu_sys).
// Three rounds of `cost_decisions` decisions, by `consume` on `threads` threads (`batch` 1) or by
// consume_many of `batch` on one; the round with the least total CPU counts. With several
// masters, the busiest one's share of the total CPU follows.
void print_server_cost(Comparison& comparison, Target& target, const Scenario& scenario, int batch,
                       int threads = 1) {
  lc::LimitCounter& limits = scenario.counter(target);
  limits.set_rules(scenario.rules);
  std::vector<NodeCost> best;
  double best_total = 1e300;
  for (int round = 0; round < rounds; ++round) {
    const std::uint64_t run = ++comparison.runs;
    std::vector<NodeCost> before;
    for (auto& node : target.masters) {
      node->command({"CONFIG", "RESETSTAT"});
      before.push_back(read_cost(*node));
    }
    // thread t decides transactions t, t + threads, ... (whole batches of them)
    const auto decide = [&](int t) {
      for (std::uint64_t i = static_cast<std::uint64_t>(t) * batch; i < cost_decisions;
           i += static_cast<std::uint64_t>(threads) * batch) {
        std::vector<lc::Transaction> transactions;
        for (std::uint64_t k = i; k < i + batch; ++k) {
          transactions.push_back(
              transaction(scenario, transaction_id(comparison.nonce, run, 0, k), k));
        }
        if (batch == 1) {
          limits.consume(transactions.front());
          continue;
        }
        for (const auto& result : limits.consume_many(transactions)) {
          if (const auto* error = std::get_if<lc::Error>(&result)) {
            throw *error;
          }
        }
      }
    };
    std::vector<std::exception_ptr> failures(static_cast<std::size_t>(threads));
    const auto decide_or_keep = [&](int t) {
      try {
        decide(t);
      } catch (...) {
        failures[static_cast<std::size_t>(t)] = std::current_exception();
      }
    };
    std::vector<std::thread> workers;
    for (int t = 1; t < threads; ++t) {
      workers.emplace_back(decide_or_keep, t);
    }
    decide_or_keep(0);
    for (auto& worker : workers) {
      worker.join();
    }
    for (const auto& failure : failures) {
      if (failure) {
        std::rethrow_exception(failure);
      }
    }
    std::vector<NodeCost> per_decision;
    double total = 0;
    for (std::size_t m = 0; m < target.masters.size(); ++m) {
      const NodeCost after = read_cost(*target.masters[m]);
      per_decision.push_back({after.script_calls / cost_decisions,
                              after.script_usec / cost_decisions,
                              (after.cpu_usec - before[m].cpu_usec) / cost_decisions});
      total += per_decision.back().cpu_usec;
    }
    if (total < best_total) {
      best_total = total;
      best = per_decision;
    }
  }
  const auto served = slots_per_master(target, scenario);
  const std::string name = scenario.name + (batch > 1     ? "_batch" + std::to_string(batch)
                                            : threads > 1 ? "_threads" + std::to_string(threads)
                                                          : "");
  NodeCost sum;
  double busiest = 0;
  for (std::size_t m = 0; m < best.size(); ++m) {
    print_cost_row(name, target.name, target.master_names[m], served[m], best[m]);
    sum.script_calls += best[m].script_calls;
    sum.script_usec += best[m].script_usec;
    sum.cpu_usec += best[m].cpu_usec;
    busiest = std::max(busiest, best[m].cpu_usec);
  }
  if (best.size() > 1) {
    print_cost_row(
        name, target.name, "all masters",
        "busiest master: " + std::to_string(static_cast<int>(100 * busiest / sum.cpu_usec + 0.5)) +
            " % of the CPU",
        sum);
  }
}

// Issue 14 item 1 on a cluster: what 100 consumed transactions keep in all, per transaction:
// `MEMORY USAGE ... SAMPLES 0` of each home record and of every share record its plan names
// (`LimitCounter::transaction_record`'s `records`),
// with the default key prefix and 17-character ids (as tests/cluster/home_record_format_test.cpp
// asserts).
double cluster_record_bytes(Target& target, const std::string& nonce, const lc::RuleSet& rules,
                            const std::string& name) {
  lc::LimitCounter limits(*target.redis, lc::Calendar("Asia/Shanghai"));
  limits.set_rules(rules);
  constexpr int transactions = 100;
  const Scenario scenario{name, rules, 50, false};
  double bytes = 0;
  for (int i = 0; i < transactions; ++i) {
    char number[8];
    std::snprintf(number, sizeof number, "%07d", i);
    const std::string id = "r" + nonce.substr(nonce.size() - 8) + name + number; // 17 characters
    if (!limits.consume(transaction(scenario, id, static_cast<std::uint64_t>(i))).allowed()) {
      throw std::runtime_error("cluster_record_bytes: a consume was denied");
    }
    const lc::TransactionRecord record = limits.transaction_record(id).value();
    for (const std::string& key : record.records) {
      bytes += static_cast<double>(
          target.redis->command({"MEMORY", "USAGE", key, "SAMPLES", "0"}).to_int64());
    }
  }
  return bytes / transactions;
}

} // namespace

void run_cluster_comparison(const std::string& standalone_uri, const std::string& cluster_uri,
                            std::chrono::milliseconds duration, int threads) {
  const std::string nonce = std::to_string(lc::Clock::now().time_since_epoch().count());
  Target standalone = make_target("standalone", standalone_uri, nonce, threads);
  Target cluster = make_target("cluster", cluster_uri, nonce, threads);
  if (!cluster.redis->is_cluster()) {
    throw std::invalid_argument("--cluster needs a redis-cluster:// URI, not \"" + cluster_uri +
                                "\"");
  }
  Comparison comparison{standalone, cluster, nonce, duration, threads, 0, {}};
  // The one-shape scenarios cycle through 10,000 merchants so that 64 buckets all serve some.
  const Scenario scenarios[] = {
      {"consume_4_shapes", rules_of_four_shapes(), 50, false},
      {"consume_1_shape", rules_of_one_shape(), 10'000, false},
      {"consume_1_shape_b" + std::to_string(bucket_count), rules_of_one_shape(), 10'000, true},
  };
  for (const auto& scenario : scenarios) {
    comparison.compare(scenario);
  }

  std::printf("Redis Cluster of %zu master(s) next to a standalone server; sync = 1 thread, "
              "threads = %d threads, batch64 = consume_many of 64; latency per call\n",
              cluster.masters.size(), threads);
  print_comparison(comparison.rows);

  std::printf("\nserver cost per decision (%d decisions, sync, _batch64: consume_many of 64, "
              "_threads64: 64 threads, "
              "best of %d rounds)\n",
              cost_decisions, rounds);
  std::printf("%-25s %-11s %-21s %-38s %8s %10s %10s\n", "scenario", "target", "master",
              "counter slots it serves", "scripts", "scripts us", "cpu us");
  // One share's worth of work (one slot, one rule, its own record): what the home record's
  // begin and finish add to a decision is its total minus one of these per share.
  const Scenario one_rule{"consume_1_rule", rules_of_one_rule(), 10'000, false};
  for (const auto& scenario : {scenarios[0], scenarios[1], scenarios[2], one_rule}) {
    for (auto* target : {&standalone, &cluster}) {
      print_server_cost(comparison, *target, scenario, 1);
    }
  }
  for (const auto& scenario : {scenarios[0], scenarios[1]}) {
    for (auto* target : {&standalone, &cluster}) {
      print_server_cost(comparison, *target, scenario, 64);
      print_server_cost(comparison, *target, scenario, 1, 64);
    }
  }

  std::printf("\nrecord bytes per transaction on the cluster (home record + share records, "
              "default prefix, 17-character ids, 100 consumes): consume_1_rule %.1f, "
              "consume_4_shapes %.1f\n",
              cluster_record_bytes(cluster, nonce, rules_of_one_rule(), "a"),
              cluster_record_bytes(cluster, nonce, rules_of_four_shapes(), "b"));
}

} // namespace bench
