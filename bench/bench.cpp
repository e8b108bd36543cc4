// limitcounter benchmarks: each scenario runs the library and raw hiredis doing the same
// script call, in the same run, and reports both and their ratio.
//
//   limitcounter_bench <redis-uri> [--json] [--millis N] [--only SUBSTRING]
//   limitcounter_bench <redis-uri> --cluster <redis-cluster-uri> [--millis N]
//     (the consume scenarios on the cluster next to the standalone server, see cluster.hpp)

#include <atomic>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <thread>

#include <hiredis/hiredis.h>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/limitcounter.hpp>

#include "cluster.hpp"
#include "driver.hpp"
#include "limit_counter/codec/decide_arguments.hpp"
#include "limit_counter/rule_matching.hpp"

namespace lc = limitcounter;
using namespace std::chrono_literals;

namespace {

constexpr int thread_count = 4;
constexpr int many_threads = 64; // the `_threads64` rows
constexpr int batch = 64;
constexpr int rounds = 3;

// Raw hiredis: one connection per thread, the same EVALSHA the library sends.
class RawClient {
public:
  RawClient(const lc::RedisOptions& options) {
    context_ = redisConnect(options.host.c_str(), options.port);
    if (context_ == nullptr || context_->err != 0) {
      throw std::runtime_error("raw hiredis cannot connect");
    }
  }
  ~RawClient() { redisFree(context_); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  void append(const lc::ScriptCall& call) {
    argv_.clear();
    lengths_.clear();
    numkeys_ = std::to_string(call.keys.size());
    push("EVALSHA", 7);
    push(call.script->sha1.data(), call.script->sha1.size());
    push(numkeys_.data(), numkeys_.size());
    for (const auto& key : call.keys) {
      push(key.data(), key.size());
    }
    for (const auto& arg : call.args) {
      push(arg.data(), arg.size());
    }
    append_pushed();
  }
  void append(const std::vector<std::string>& argv) {
    argv_.clear();
    lengths_.clear();
    for (const auto& arg : argv) {
      push(arg.data(), arg.size());
    }
    append_pushed();
  }
  // Reads `replies` replies; returns how many are arrays whose first element is the integer 1.
  int read(int replies) {
    int first_one = 0;
    for (int i = 0; i < replies; ++i) {
      void* reply = nullptr;
      if (redisGetReply(context_, &reply) != REDIS_OK) {
        throw std::runtime_error("raw hiredis failed");
      }
      if (static_cast<redisReply*>(reply)->type == REDIS_REPLY_ERROR) {
        throw std::runtime_error(std::string("raw hiredis error: ") +
                                 static_cast<redisReply*>(reply)->str);
      }
      const auto* array = static_cast<redisReply*>(reply);
      if (array->type == REDIS_REPLY_ARRAY && array->elements > 0 &&
          array->element[0]->type == REDIS_REPLY_INTEGER && array->element[0]->integer == 1) {
        ++first_one;
      }
      freeReplyObject(reply);
    }
    return first_one;
  }

private:
  void push(const char* data, std::size_t size) {
    argv_.push_back(data);
    lengths_.push_back(size);
  }
  void append_pushed() {
    redisAppendCommandArgv(context_, static_cast<int>(argv_.size()), argv_.data(), lengths_.data());
  }
  redisContext* context_;
  std::vector<const char*> argv_;
  std::vector<std::size_t> lengths_;
  std::string numkeys_;
};

struct Scenario {
  std::string name;
  // The exact call the library makes for operation i of thread t (for the baseline).
  std::function<lc::ScriptCall(int t, std::uint64_t i)> call;
  std::function<void(int t, std::uint64_t i)> library;
  std::function<void(int t, std::uint64_t i)> library_batch; // 64 operations, or empty
  std::function<void()> reset;                               // before each side and mode, or empty
};

struct Bench {
  lc::RedisOptions options;
  lc::Redis redis;
  std::chrono::milliseconds duration;
  std::string nonce;
  std::vector<bench::Row> rows;
  /// The server at every default option (pool_size 8, pool_wait_timeout 1 s): the
  /// `_threads64` rows share one such Redis among 64 threads.
  lc::RedisOptions default_options;

  // The `_sync`, `_threads` and `_batch64` rows of `scenario`; with `threads64`, its
  // `_threads64` row instead: 64 threads, every call that throws counted as a failure on
  // either side (the baseline has one connection per thread).
  void run(const Scenario& scenario, bool threads64 = false) {
    std::vector<std::unique_ptr<RawClient>> raw;
    for (int t = 0; t < (threads64 ? many_threads : thread_count); ++t) {
      raw.push_back(std::make_unique<RawClient>(options));
    }
    const auto baseline = [&](int t, std::uint64_t i) {
      raw[static_cast<std::size_t>(t)]->append(scenario.call(t, i));
      raw[static_cast<std::size_t>(t)]->read(1);
    };
    const auto baseline_batch = [&](int t, std::uint64_t i) {
      for (int k = 0; k < batch; ++k) {
        raw[static_cast<std::size_t>(t)]->append(
            scenario.call(t, i * batch + static_cast<std::uint64_t>(k)));
      }
      raw[static_cast<std::size_t>(t)]->read(batch);
    };
    const auto side = [&](int threads, int per_call,
                          const std::function<void(int, std::uint64_t)>& op) {
      if (scenario.reset) {
        scenario.reset();
      }
      return bench::measure(threads, duration / rounds, per_call, op);
    };
    // Library and baseline take turns, `rounds` times each; the best round of each side
    // counts, so that a pause of this shared machine hurts neither side more.
    const auto row = [&](const std::string& mode, int threads, int per_call,
                         const std::function<void(int, std::uint64_t)>& library,
                         const std::function<void(int, std::uint64_t)>& raw_op) {
      bench::Row best{scenario.name + mode, {}, {}};
      for (int round = 0; round < rounds; ++round) {
        const auto lib = side(threads, per_call, library);
        const auto raw_result = side(threads, per_call, raw_op);
        best.library = lib.ops_per_s > best.library.ops_per_s ? lib : best.library;
        best.baseline = raw_result.ops_per_s > best.baseline.ops_per_s ? raw_result : best.baseline;
      }
      rows.push_back(best);
    };
    if (threads64) {
      std::atomic<std::uint64_t> failures[2] = {{0}, {0}};
      const auto counted = [&failures](int who, const std::function<void(int, std::uint64_t)>& op) {
        return [&failures, who, op](int t, std::uint64_t i) {
          try {
            op(t, i);
          } catch (const std::exception&) {
            ++failures[who];
          }
        };
      };
      row("_threads64", many_threads, 1, counted(0, scenario.library), counted(1, baseline));
      rows.back().library.failures = failures[0];
      rows.back().baseline.failures = failures[1];
      return;
    }
    row("_sync", 1, 1, scenario.library, baseline);
    row("_threads", thread_count, 1, scenario.library, baseline);
    if (scenario.library_batch) {
      row("_batch64", 1, batch, scenario.library_batch, baseline_batch);
    }
  }
};

std::string id(const char* kind, const std::string& nonce, int t, std::uint64_t i) {
  return std::string(kind) + nonce.substr(nonce.size() - 6) + "-" + std::to_string(t) + "-" +
         std::to_string(i);
}

// sms_cap rows; with `threads64`, its `_threads64` row (`counter` then on a default Redis).
void cap_scenario(Bench& bench, lc::LimitCounter& counter, bool threads64) {
  const auto now = lc::Clock::now();
  Scenario cap;
  cap.name = "sms_cap";
  const auto day = counter.calendar().window(lc::Period::day, now);
  const std::string cap_key = counter.keys().cap_window("sms", day.id);
  const std::string cap_expiry = std::to_string(
      std::chrono::duration_cast<std::chrono::milliseconds>((day.end + 1h).time_since_epoch())
          .count());
  cap.call = [=](int, std::uint64_t i) {
    return lc::ScriptCall{&lc::scripts::cap_take,
                          {cap_key},
                          {"acct" + std::to_string(i % 1000), "1", "1000000000000", cap_expiry}};
  };
  cap.library = [&, now](int, std::uint64_t i) {
    counter.take_daily_cap("sms", "acct" + std::to_string(i % 1000), 1'000'000'000'000, now);
  };
  cap.library_batch = [&, now](int, std::uint64_t i) {
    std::vector<lc::CapRequest> requests;
    for (std::uint64_t k = i * batch; k < (i + 1) * batch; ++k) {
      requests.push_back({"sms", "acct" + std::to_string(k % 1000), 1'000'000'000'000, now, 1});
    }
    counter.take_daily_cap_many(requests);
  };
  bench.run(cap, threads64);
}

void counter_scenarios(Bench& bench, lc::LimitCounter& counter) {
  const auto now = lc::Clock::now();
  const std::vector<lc::Period> periods{lc::Period::day, lc::Period::month};
  std::vector<std::string> keys;
  std::vector<std::string> expiries;
  for (const auto period : periods) {
    const auto window = counter.calendar().window(period, now);
    keys.push_back(counter.keys().window("channel", period, window.id));
    expiries.push_back(std::to_string(
        std::chrono::duration_cast<std::chrono::milliseconds>((window.end + 1h).time_since_epoch())
            .count()));
  }
  const auto dimension = [](std::uint64_t i) {
    return lc::Dimension{"Ali", "Deduct", "b" + std::to_string(i % 100)};
  };
  Scenario add;
  add.name = "counter_add";
  add.call = [=](int, std::uint64_t i) {
    return lc::ScriptCall{&lc::scripts::counter_add,
                          keys,
                          {dimension(i).field(), "1", "100", expiries[0], expiries[1]}};
  };
  add.library = [&, periods, now, dimension](int, std::uint64_t i) {
    counter.add("channel", dimension(i), periods, 1, 100, now);
  };
  add.library_batch = [&, periods, now, dimension](int, std::uint64_t i) {
    std::vector<lc::AddRequest> requests;
    for (int k = 0; k < batch; ++k) {
      requests.push_back(
          {"channel", dimension(i * batch + static_cast<std::uint64_t>(k)), periods, 1, 100, now});
    }
    counter.add_many(requests);
  };
  bench.run(add);

  cap_scenario(bench, counter, false);

  Scenario sliding;
  sliding.name = "sliding_window";
  sliding.call = [&bench, &counter](int t, std::uint64_t i) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(lc::Clock::now().time_since_epoch())
            .count();
    return lc::ScriptCall{&lc::scripts::sliding_window,
                          {counter.keys().sliding("pay", "m" + std::to_string(i % 1000))},
                          {std::to_string(ms), "60000", "1000000000", id("r", bench.nonce, t, i)}};
  };
  sliding.library = [&](int, std::uint64_t i) {
    counter.hit_sliding_window("pay", "m" + std::to_string(i % 1000), 1'000'000'000, 60s);
  };
  sliding.library_batch = [&](int, std::uint64_t i) {
    std::vector<lc::SlidingRequest> requests;
    const auto at = lc::Clock::now();
    for (std::uint64_t k = i * batch; k < (i + 1) * batch; ++k) {
      requests.push_back({"pay", "m" + std::to_string(k % 1000), 1'000'000'000, 60s, at});
    }
    counter.hit_sliding_window_many(requests);
  };
  bench.run(sliding);
}

// `count` rules over the shapes merchant, dept, channel, user and the periods day, month,
// hour, minute (4 shapes x 4 periods at most).
lc::RuleSet consume_rules(int count) {
  static const char* const shapes[] = {"merchant", "dept", "channel", "user"};
  static const lc::Period periods[] = {lc::Period::day, lc::Period::month, lc::Period::hour,
                                       lc::Period::minute};
  lc::RuleSet rules;
  for (int r = 0; r < count; ++r) {
    rules.add(lc::Rule("r" + std::to_string(r))
                  .where(shapes[r % 4])
                  .per(periods[r / 4])
                  .max_amount(1'000'000'000'000'000));
  }
  return rules;
}

// The exact limit.lua call the library makes to decide `transaction(t, i)`, for the baseline:
// its arguments come from the library's own builder (kept per thread while the fingerprint
// stays the same); only the record key changes per transaction.
std::function<lc::ScriptCall(int, std::uint64_t)>
decide_calls(const lc::LimitCounter& limits, const lc::RuleSet& rules, lc::TimePoint now,
             std::function<lc::Transaction(int, std::uint64_t)> transaction) {
  return [&limits, keys = lc::CounterKeys(limits.keys()), rules, now,
          transaction](int t, std::uint64_t i) {
    const lc::Transaction tx = transaction(t, i);
    lc::detail::DecideContext context;
    context.calendar = &limits.calendar();
    context.keys = &keys;
    context.window_grace = 1h;
    context.replay_horizon = 24h;
    context.reservation_timeout = 15min;
    context.now = now;
    static thread_local std::optional<lc::detail::LimitCall> templates[16];
    auto& cached = templates[static_cast<std::size_t>(i % 50 % 16)];
    if (!cached || lc::detail::decide_fingerprint(cached->args) !=
                       lc::detail::fingerprint(limitcounter::LimitOp::consume, tx)) {
      const auto matched = lc::detail::match_rules(rules, tx);
      cached = lc::detail::build_decide(limitcounter::LimitOp::consume, tx, matched.per_transaction,
                                        matched.window, context);
    }
    lc::ScriptCall call{&lc::scripts::limit, cached->keys, cached->args};
    call.keys[0] = keys.transaction(tx.id);
    return call;
  };
}

// consume_<n>_rules rows; with `threads64`, its `_threads64` row (`limits` then on a default
// Redis).
void consume_scenario(Bench& bench, lc::LimitCounter& limits, int rule_count, bool threads64) {
  const lc::RuleSet rules = consume_rules(rule_count);
  limits.set_rules(rules);
  const auto now = lc::Clock::now();
  const auto transaction = [&bench, now](const char* kind, int t, std::uint64_t i) {
    lc::Transaction tx;
    tx.id = id(kind, bench.nonce, t, i);
    tx.attributes = {{"merchant", "m" + std::to_string(i % 50)},
                     {"dept", "cmb"},
                     {"channel", "Ali"},
                     {"user", "u1"}};
    tx.amount = 100;
    tx.time = now;
    return tx;
  };
  Scenario consume;
  consume.name = "consume_" + std::to_string(rule_count) + "_rules";
  consume.call = decide_calls(
      limits, rules, now, [transaction](int t, std::uint64_t i) { return transaction("b", t, i); });
  consume.library = [&, transaction](int t, std::uint64_t i) {
    limits.consume(transaction("l", t, i));
  };
  consume.library_batch = [&, transaction](int t, std::uint64_t i) {
    std::vector<lc::Transaction> txs;
    for (int k = 0; k < batch; ++k) {
      txs.push_back(transaction("L", t, i * batch + static_cast<std::uint64_t>(k)));
    }
    limits.consume_many(txs);
  };
  bench.run(consume, threads64);
}

// Denials of an exhausted dimension (a count limit of 1, used): exhausted_cache_off sends each
// to Redis; exhausted_cache_on (max_staleness 1 s) decides them in this process, sending one
// a second. Both next to raw hiredis sending the call the library sends with the cache off.
void exhausted_scenarios(Bench& bench, const lc::LimitCounterOptions& base) {
  const lc::RuleSet rules =
      lc::RuleSet().add(lc::Rule("full").where("merchant").per(lc::Period::day).max_count(1));
  const auto now = lc::Clock::now();
  for (const bool on : {false, true}) {
    lc::LimitCounterOptions options = base;
    options.key_prefix += "exhausted:";
    options.exhausted_cache.enabled = on;
    lc::LimitCounter limits(bench.redis, lc::Calendar("Asia/Shanghai"), options);
    limits.set_rules(rules);
    const std::string kinds = on ? "cCd" : "oOp"; // library, library batch, baseline
    const auto transaction = [&bench, now, kinds](int kind, int t, std::uint64_t i) {
      const char letter[2] = {kinds[static_cast<std::size_t>(kind)], 0};
      return lc::Transaction{id(letter, bench.nonce, t, i), {{"merchant", "full"}}, 100, now};
    };
    limits.consume(transaction(0, -1, 0)); // fills the limit (a repeat in the second pass)
    Scenario denial;
    denial.name = on ? "exhausted_cache_on" : "exhausted_cache_off";
    denial.call = decide_calls(
        limits, rules, now, [transaction](int t, std::uint64_t i) { return transaction(2, t, i); });
    denial.library = [&, transaction](int t, std::uint64_t i) {
      if (limits.consume(transaction(0, t, i)).allowed()) {
        throw std::runtime_error("exhausted: a transaction was allowed");
      }
    };
    denial.library_batch = [&, transaction](int t, std::uint64_t i) {
      std::vector<lc::Transaction> txs;
      for (int k = 0; k < batch; ++k) {
        txs.push_back(transaction(1, t, i * batch + static_cast<std::uint64_t>(k)));
      }
      limits.consume_many(txs);
    };
    bench.run(denial);
  }
}

void wallet_scenario(Bench& bench) {
  lc::WalletOptions options;
  options.key_prefix = "bench:" + bench.nonce + ":wallet:";
  lc::Wallet wallet(bench.redis, options);
  for (int t = 0; t < thread_count; ++t) {
    wallet.load("u" + std::to_string(t), {1'000'000'000'000, 1, 0});
  }
  Scenario deduct;
  deduct.name = "wallet_deduct";
  deduct.call = [&](int t, std::uint64_t i) {
    const std::string user = "u" + std::to_string(t);
    const std::string order = id("b", bench.nonce, t, i);
    const auto partition = wallet.keys().partition_of(user);
    return lc::ScriptCall{&lc::scripts::wallet,
                          {wallet.keys().account(user), wallet.keys().order(user, order),
                           wallet.keys().user_pending(user), wallet.keys().journal(partition),
                           wallet.keys().pending(partition), wallet.keys().high_water(user)},
                          {"deduct", user, order, "1", "1700000000000", "604800000"}};
  };
  deduct.library = [&](int t, std::uint64_t i) {
    wallet.deduct("u" + std::to_string(t), id("l", bench.nonce, t, i), 1);
  };
  deduct.library_batch = [&](int t, std::uint64_t i) {
    std::vector<lc::WalletOrder> orders;
    for (std::uint64_t k = i * batch; k < (i + 1) * batch; ++k) {
      orders.push_back({"u" + std::to_string(t), id("L", bench.nonce, t, k), 1});
    }
    wallet.deduct_many(orders);
  };
  bench.run(deduct);
}

void grab_scenario(Bench& bench) {
  lc::RedPacketOptions options;
  options.key_prefix = "bench:" + bench.nonce + ":rp:";
  lc::RedPacketPool pool(bench.redis, options);
  int round = 0;
  std::string packet;
  Scenario grab;
  grab.name = "red_packet_grab";
  grab.reset = [&] {
    packet = "p" + std::to_string(++round);
    pool.create(packet, std::vector<std::int64_t>(400'000, 1)); // never sold out within a run
  };
  grab.call = [&](int t, std::uint64_t i) {
    const auto partition = pool.keys().partition_of(packet);
    return lc::ScriptCall{
        &lc::scripts::red_packet,
        {pool.keys().packet(packet, "meta"), pool.keys().packet(packet, "list"),
         pool.keys().packet(packet, "drawn"), pool.keys().packet(packet, "attempts"),
         pool.keys().payout(partition, "ready"), pool.keys().payout(partition, "tasks")},
        {"grab", packet, "u" + std::to_string(t) + "-" + std::to_string(i), "1700000000000"}};
  };
  grab.library = [&](int t, std::uint64_t i) {
    pool.grab(packet, "u" + std::to_string(t) + "-" + std::to_string(i));
  };
  grab.library_batch = [&](int t, std::uint64_t i) {
    std::vector<std::string> users;
    for (int k = 0; k < batch; ++k) {
      users.push_back("u" + std::to_string(t) + "-" +
                      std::to_string(i * batch + static_cast<std::uint64_t>(k)));
    }
    pool.grab_many(packet, users);
  };
  bench.run(grab);
}

// The server's script time per consume (INFO commandstats) of `limits` under `rules` over
// 2,000 calls, or `least` if that is less (the machine's pauses only ever add time). The
// merchant of call i is one of `merchants`.
double least_usec_per_consume(Bench& bench, lc::LimitCounter& limits, const lc::RuleSet& rules,
                              const std::string& kind, std::uint64_t& next_id, double least,
                              std::uint64_t merchants = 1) {
  limits.set_rules(rules);
  bench.redis.command({"CONFIG", "RESETSTAT"});
  for (int i = 0; i < 2000; ++i) {
    const std::uint64_t call = next_id++;
    limits.consume({id(kind.c_str(), bench.nonce, 0, call),
                    {{"merchant", "m" + std::to_string(call * 7919 % merchants)},
                     {"dept", "cmb"},
                     {"channel", "Ali"},
                     {"user", "u1"}},
                    100});
  }
  const bench::ScriptStats stats =
      bench::script_stats(bench.redis.command({"INFO", "commandstats"}).as_string());
  return std::min(least, stats.usec / stats.calls);
}

lc::LimitCounterOptions bucketed_options(const Bench& bench, std::uint32_t buckets) {
  lc::LimitCounterOptions options;
  options.key_prefix = "bench:" + bench.nonce + ":b" + std::to_string(buckets) + ":";
  options.counter_buckets = buckets;
  return options;
}

// The bucket counts compared: one hash; about 98 and 24 dimensions per hash at 100,000
// dimensions (within the default hash-max-listpack-entries of 128).
constexpr std::uint32_t compared_buckets[] = {1, 1024, 4096};

// Redis memory per counter (count and amount) with 100,000 dimensions of one counter in one
// day window, for each of `compared_buckets`: MEMORY USAGE summed over every bucket's hash.
void memory_per_counter(Bench& bench, bool json) {
  const auto now = lc::Clock::now();
  for (const std::uint32_t buckets : compared_buckets) {
    lc::LimitCounter counter(bench.redis, lc::Calendar("Asia/Shanghai"),
                             bucketed_options(bench, buckets));
    std::vector<lc::AddRequest> requests;
    for (int i = 0; i < 100'000; ++i) {
      requests.push_back({"memory",
                          lc::Dimension{"Ali", "Deduct", "bank" + std::to_string(i)},
                          {lc::Period::day},
                          1,
                          12345,
                          now});
      if (requests.size() == 1000) {
        counter.add_many(requests);
        requests.clear();
      }
    }
    const auto& keys = counter.keys();
    const std::string day = counter.calendar().window(lc::Period::day, now).id;
    long long total = 0;
    for (std::uint32_t bucket = 0; bucket < buckets; ++bucket) {
      const lc::Reply used = bench.redis.command(
          {"MEMORY", "USAGE", keys.window(keys.bucket_tag("memory", bucket), lc::Period::day, day),
           "SAMPLES", "0"});
      total += used.is_nil() ? 0 : used.as_integer();
    }
    const double bytes = static_cast<double>(total) / 100'000;
    if (json) {
      std::printf("{\"scenario\": \"counter_bytes_buckets%u\", \"bytes_per_counter\": %.1f, "
                  "\"dimensions\": 100000, \"buckets\": %u}\n",
                  buckets, bytes, buckets);
    } else {
      std::printf("memory per counter (count and amount, 100,000 dimensions, %u bucket(s)): "
                  "%.1f bytes\n",
                  buckets, bytes);
    }
  }
}

// Server time of EVALSHA per call (INFO commandstats) for consume with 1 and 16 rules
// (16 counters: 4 shapes x 4 periods). The two take turns for 5 rounds of 2,000 calls; the
// least time per call of each counts, as the machine's pauses only ever add time.
void server_time_per_rule(Bench& bench, lc::LimitCounter& limits, bool json) {
  const lc::RuleSet rule_sets[2] = {consume_rules(1), consume_rules(16)};
  double usec[2] = {1e9, 1e9};
  std::uint64_t next_id = 0;
  for (int round = 0; round < 5; ++round) {
    for (int k = 0; k < 2; ++k) {
      usec[k] = least_usec_per_consume(bench, limits, rule_sets[k], "s" + std::to_string(k),
                                       next_id, usec[k]);
    }
  }
  const double per_rule = (usec[1] - usec[0]) / 15;
  if (json) {
    std::printf(
        "{\"scenario\": \"consume_server_time\", \"usec_1_rule\": %.2f, \"usec_16_rules\": %.2f, "
        "\"usec_per_extra_rule\": %.3f}\n",
        usec[0], usec[1], per_rule);
  } else {
    std::printf("server time of consume: %.2f us with 1 rule, %.2f us with 16 rules: %.3f us per "
                "extra rule\n",
                usec[0], usec[1], per_rule);
  }
}

// A transaction as the consume rows send it: 4 attributes, so that 1 to 16 rules match.
lc::Transaction bench_transaction(std::string id, std::int64_t amount, std::uint64_t merchant) {
  return {std::move(id),
          {{"merchant", "m" + std::to_string(merchant)},
           {"dept", "cmb"},
           {"channel", "Ali"},
           {"user", "u1"}},
          amount,
          lc::Clock::now()};
}

// Redis memory of one transaction's record (MEMORY USAGE, mean of 100), with the default key
// prefix: consumed with 1 and 4 rules, denied, reserved, consumed then fully refunded, with ids of
// 17 characters and the bench's short dimension values, then with 36-character UUIDs and
// 10-character merchant and user ids; the counter set the 4-rule records share (one per rules and
// windows, not per transaction); and used_memory per transaction over 5,000 consumes of 4 rules
// whose users are all distinct (record, counter fields and all).
void record_bytes(Bench& bench, bool json) {
  lc::LimitCounter limits(bench.redis, lc::Calendar("Asia/Shanghai"), lc::LimitCounterOptions{});
  const std::string tag = bench.nonce.substr(bench.nonce.size() - 6);
  std::uint64_t next = 0;
  const auto uuid = [&] {
    char text[40];
    std::snprintf(text, sizeof text, "%08x-%04x-4%03x-a%03x-%012llx",
                  static_cast<unsigned>(std::stoul(tag, nullptr, 36) & 0xffffffffU),
                  static_cast<unsigned>(next & 0xffff), 7U, 9U,
                  static_cast<unsigned long long>(1000000 + next));
    ++next;
    return std::string(text);
  };
  enum class Step { consume, reserve, consume_and_refund };
  const auto mean_bytes = [&](const char* kind, const lc::RuleSet& rules, Step step,
                              std::int64_t amount, bool long_names) {
    limits.set_rules(rules);
    long long total = 0;
    for (int i = 0; i < 100; ++i) {
      const std::string id =
          long_names ? uuid() : std::string("pay-") + kind + tag + "-" + std::to_string(1000 + i);
      auto transaction = bench_transaction(id, amount, 7);
      if (long_names) {
        transaction.attributes["merchant"] = "M100234567";
        transaction.attributes["user"] = "U" + std::to_string(200000000 + i);
      }
      if (step == Step::reserve) {
        limits.reserve(transaction);
      } else if (!limits.consume(transaction).allowed() && step == Step::consume_and_refund) {
        throw std::runtime_error("record_bytes: the consume to refund was denied");
      }
      if (step == Step::consume_and_refund) {
        limits.refund(id);
      }
      total +=
          bench.redis.command({"MEMORY", "USAGE", limits.keys().transaction(id), "SAMPLES", "0"})
              .as_integer();
    }
    return static_cast<double>(total) / 100;
  };
  lc::RuleSet tight = consume_rules(3);
  tight.add(lc::Rule("tight").where("user").per(lc::Period::day).max_amount(50));
  double bytes[2][5];
  for (int long_names = 0; long_names < 2; ++long_names) {
    const char* kinds = long_names ? "efghj" : "abcdi";
    bytes[long_names][0] = mean_bytes(&kinds[0], consume_rules(1), Step::consume, 100, long_names);
    bytes[long_names][1] = mean_bytes(&kinds[1], consume_rules(4), Step::consume, 100, long_names);
    bytes[long_names][2] = mean_bytes(&kinds[2], tight, Step::consume, 100, long_names);
    bytes[long_names][3] = mean_bytes(&kinds[3], consume_rules(4), Step::reserve, 100, long_names);
    bytes[long_names][4] =
        mean_bytes(&kinds[4], consume_rules(4), Step::consume_and_refund, 100, long_names);
  }
  // The counter set of the 4-rule records
  const lc::RuleSet four_rules = consume_rules(4);
  const auto transaction = bench_transaction("pay-any", 100, 7);
  const auto matched = lc::detail::match_rules(four_rules, transaction);
  lc::detail::DecideContext context;
  context.calendar = &limits.calendar();
  context.keys = &limits.keys();
  context.window_grace = 1h;
  context.replay_horizon = 24h;
  context.now = lc::Clock::now();
  const auto call = lc::detail::build_decide(limitcounter::LimitOp::consume, transaction,
                                             matched.per_transaction, matched.window, context);
  const double set_bytes =
      double(bench.redis.command({"MEMORY", "USAGE", call.keys[1], "SAMPLES", "0"}).as_integer());
  // Distinct users: each transaction also adds a field to the user rule's window hash.
  const auto used_memory = [&] {
    const std::string info = bench.redis.command({"INFO", "memory"}).as_string();
    return std::stod(info.substr(info.find("used_memory:") + 12));
  };
  // On an empty server: in a full bench run the keyspace the earlier rows left is large, and a
  // doubling of its hash table during these 5,000 transactions (tens of MB) counted ~1,100
  // bytes a transaction where this row alone counts ~285.
  bench.redis.command({"FLUSHDB", "SYNC"});
  limits.set_rules(four_rules);
  constexpr int distinct = 5000;
  std::vector<lc::Transaction> pending;
  const double before = used_memory();
  for (int i = 0; i < distinct; ++i) {
    auto paying = bench_transaction("pay-u" + tag + "-" + std::to_string(100000 + i), 100, 7);
    paying.attributes["user"] = "u" + tag + "-" + std::to_string(100000 + i);
    pending.push_back(std::move(paying));
    if (pending.size() == batch || i + 1 == distinct) {
      limits.consume_many(pending);
      pending.clear();
    }
  }
  const double per_distinct = (used_memory() - before) / distinct;
  if (json) {
    std::printf("{\"scenario\": \"record_bytes\", \"consumed_1_rule\": %.1f, "
                "\"consumed_4_rules\": %.1f, \"denied_4_rules\": %.1f, \"reserved_4_rules\": "
                "%.1f, \"refunded_4_rules\": %.1f, \"uuid_consumed_1_rule\": %.1f, "
                "\"uuid_consumed_4_rules\": %.1f, \"uuid_denied_4_rules\": %.1f, "
                "\"uuid_reserved_4_rules\": %.1f, \"uuid_refunded_4_rules\": %.1f, "
                "\"counter_set_4_rules\": %.1f, \"used_memory_per_tx_distinct_users\": %.1f}\n",
                bytes[0][0], bytes[0][1], bytes[0][2], bytes[0][3], bytes[0][4], bytes[1][0],
                bytes[1][1], bytes[1][2], bytes[1][3], bytes[1][4], set_bytes, per_distinct);
  } else {
    for (int long_names = 0; long_names < 2; ++long_names) {
      std::printf("record bytes%s: consumed %.1f (1 rule), %.1f (4 rules); denied %.1f; reserved "
                  "%.1f; refunded %.1f\n",
                  long_names ? " (UUID ids, 10-character merchant and user)" : "",
                  bytes[long_names][0], bytes[long_names][1], bytes[long_names][2],
                  bytes[long_names][3], bytes[long_names][4]);
    }
    std::printf("the 4 rules' counter set %.1f bytes, shared by every record under them; "
                "used_memory per 4-rule transaction of a distinct user %.1f bytes\n",
                set_bytes, per_distinct);
  }
}

// The redis-server process's CPU time so far (INFO cpu: used_cpu_user + used_cpu_sys), in µs.
double server_cpu_usec(Bench& bench) {
  const std::string info = bench.redis.command({"INFO", "cpu"}).as_string();
  const auto value = [&](const char* name) {
    const auto at = info.find(name);
    return std::stod(info.substr(at + std::strlen(name)));
  };
  return (value("used_cpu_sys:") + value("used_cpu_user:")) * 1e6;
}

// One kind of round whose Redis cost per decision is measured: `run()` sends `decisions` more
// decisions.
struct CostRound {
  double decisions;
  std::function<void()> run;
};

// How many turns least_per_decision takes (each a round of every kind). This VM's host noise
// comes and goes within seconds and moves a round's CPU by half or more: the least of 9 rounds
// of each kind, taken in turns, gives every kind its share of the quiet moments.
constexpr int cost_turns = 9;

// The least Redis CPU and script time (EVALSHA and FCALL) per decision, in µs, of each kind in
// `kinds`: `cost_turns` turns, each one round of every kind in order. Taking turns gives every
// kind the same host moments and the same keyspace (records accumulate as rounds go), so their
// figures compare; the least round of a kind is the one the host disturbed least.
std::vector<std::pair<double, double>> least_per_decision(Bench& bench,
                                                          const std::vector<CostRound>& kinds) {
  std::vector<std::pair<double, double>> least(kinds.size(), {1e9, 1e9});
  for (int turn = 0; turn < cost_turns; ++turn) {
    for (std::size_t kind = 0; kind < kinds.size(); ++kind) {
      bench.redis.command({"CONFIG", "RESETSTAT"});
      const double before = server_cpu_usec(bench);
      kinds[kind].run();
      const double used = server_cpu_usec(bench) - before;
      const bench::ScriptStats stats =
          bench::script_stats(bench.redis.command({"INFO", "commandstats"}).as_string());
      least[kind].first = std::min(least[kind].first, used / kinds[kind].decisions);
      least[kind].second = std::min(least[kind].second, stats.usec / kinds[kind].decisions);
    }
  }
  return least;
}

// The SHA1 of bench/lua/`name`, loaded into the bench's server.
std::string load_bench_script(Bench& bench, const std::string& name) {
  const std::string path = LIMITCOUNTER_BENCH_LUA_DIR "/" + name;
  std::ifstream file(path);
  const std::string source((std::istreambuf_iterator<char>(file)),
                           std::istreambuf_iterator<char>());
  if (source.empty()) {
    throw std::runtime_error("cannot read " + path);
  }
  return bench.redis.command({"SCRIPT", "LOAD", source}).as_string();
}

// The floor under a 1-rule decision on this server: bench/lua/decision_floor.lua sends only the
// Redis commands a 1-rule consume cannot do without (the record's SET ... NX GET PXAT per
// transaction, one HMGET and one HSET of the counter per call), with keys, record text and fields
// shaped as the library's, in the same batches. What the library spends above it is its own.
// (`limits` names the keys; it must outlive the round.)
CostRound decision_floor(Bench& bench, const lc::LimitCounter& limits) {
  const std::string sha = load_bench_script(bench, "decision_floor.lua");
  const std::string counter =
      limits.keys().window(limits.keys().tag("merchant", "m0"), lc::Period::day,
                           limits.calendar().window(lc::Period::day, lc::Clock::now()).id);
  const std::string expiry = std::to_string(
      std::chrono::duration_cast<std::chrono::milliseconds>(
          (std::chrono::system_clock::now() + std::chrono::hours(24)).time_since_epoch())
          .count());
  return {50.0 * batch, [&bench, &limits, sha, counter, expiry, next = std::uint64_t{0}]() mutable {
            for (int call = 0; call < 50; ++call) {
              std::vector<std::string> argv{"EVALSHA", sha, std::to_string(batch + 1)};
              std::vector<std::string> fields;
              for (int k = 0; k < batch; ++k, ++next) {
                argv.push_back(limits.keys().transaction(id("f", bench.nonce, 1, next)));
                fields.push_back("m" + std::to_string(next % 50));
              }
              argv.push_back(counter);
              argv.push_back(expiry);
              argv.push_back("c AbCdEfGhIjK 100 AbCdEfGhIjK m7");
              argv.insert(argv.end(), fields.begin(), fields.end());
              if (bench.redis.command(argv).as_array().size() != batch) {
                throw std::runtime_error("decision_floor: not one reply per transaction");
              }
            }
          }};
}

// A rate limiter that keeps no record, on this server: bench/lua/reference_gcra.lua decides one
// request per call, one of 50 subjects (as the rows' 50 merchants), 64 calls in flight on one
// connection (pipelined), as many batches as the library's rows. Every request is allowed.
CostRound record_less_limiter(Bench& bench) {
  const std::string sha = load_bench_script(bench, "reference_gcra.lua");
  // (shared: std::function copies what it holds, and a connection cannot be copied)
  auto raw = std::make_shared<RawClient>(bench.options);
  return {50.0 * batch, [&bench, sha, raw, next = std::uint64_t{0}]() mutable {
            for (int call = 0; call < 50; ++call) {
              for (int k = 0; k < batch; ++k, ++next) {
                // 1 ms apart, a burst of 10^12 ms: never denied
                raw->append({"EVALSHA", sha, "1",
                             "bench:" + bench.nonce + ":gcra:m" + std::to_string(next % 50), "1",
                             "1000000000000"});
              }
              if (raw->read(batch) != batch) {
                throw std::runtime_error("reference_gcra: a request was not allowed");
              }
            }
          }};
}

// Redis CPU and script time per decision of consume_many in batches of 64 (each batch one
// script call), with 1, 4 and 16 rules, the floor under a 1-rule decision (decision_floor) and a
// record-less limiter's decision (record_less_limiter): rounds of 50 batches each, taken in
// turns (least_per_decision), the least round of each.
void server_cpu_batch64(Bench& bench, bool json) {
  const int rule_counts[3] = {1, 4, 16};
  std::vector<std::unique_ptr<lc::LimitCounter>> counters;
  std::vector<CostRound> kinds;
  std::uint64_t next = 0; // (the kinds run only within this function)
  for (const int rule_count : rule_counts) {
    lc::LimitCounterOptions options;
    options.key_prefix = "bench:" + bench.nonce + ":cpu" + std::to_string(rule_count) + ":";
    counters.push_back(
        std::make_unique<lc::LimitCounter>(bench.redis, lc::Calendar("Asia/Shanghai"), options));
    lc::LimitCounter& limits = *counters.back();
    limits.set_rules(consume_rules(rule_count));
    kinds.push_back(
        {50.0 * batch, [&bench, &limits, rule_count, &next]() {
           std::vector<std::vector<lc::Transaction>> batches(50);
           for (auto& transactions : batches) {
             for (int k = 0; k < batch; ++k, ++next) {
               transactions.push_back(
                   bench_transaction(id("c", bench.nonce, rule_count, next), 100, next % 50));
             }
           }
           std::size_t allowed = 0;
           for (const auto& transactions : batches) {
             for (const auto& result : limits.consume_many(transactions)) {
               if (const auto* error = std::get_if<lc::Error>(&result)) {
                 throw *error; // a measurement of failing calls measures nothing
               }
               allowed += std::get<lc::Decision>(result).allowed() ? 1 : 0;
             }
           }
           if (allowed != batches.size() * batch) {
             throw std::runtime_error("consume_server_cpu_batch64: " + std::to_string(allowed) +
                                      " of " + std::to_string(batches.size() * batch) + " allowed");
           }
         }});
  }
  lc::LimitCounterOptions floor_options;
  floor_options.key_prefix = "bench:" + bench.nonce + ":floor:";
  const lc::LimitCounter floor_keys(bench.redis, lc::Calendar("Asia/Shanghai"), floor_options);
  kinds.push_back(decision_floor(bench, floor_keys));
  kinds.push_back(record_less_limiter(bench));
  const auto least = least_per_decision(bench, kinds);
  double cpu[3];
  double script[3];
  for (int k = 0; k < 3; ++k) {
    std::tie(cpu[k], script[k]) = least[k];
  }
  const auto [floor_cpu, floor_script] = least[3];
  const auto [gcra_cpu, gcra_script] = least[4];
  const double per_rule = (script[2] - script[0]) / 15;
  if (json) {
    std::printf("{\"scenario\": \"consume_server_cpu_batch64\", \"cpu_usec_1_rule\": %.2f, "
                "\"cpu_usec_4_rules\": %.2f, \"cpu_usec_16_rules\": %.2f, "
                "\"script_usec_1_rule\": %.2f, \"script_usec_4_rules\": %.2f, "
                "\"script_usec_16_rules\": %.2f, \"script_usec_per_extra_rule\": %.3f, "
                "\"floor_cpu_usec_1_rule\": %.2f, \"floor_script_usec_1_rule\": %.2f, "
                "\"record_less_limiter_cpu_usec\": %.2f, "
                "\"record_less_limiter_script_usec\": %.2f}\n",
                cpu[0], cpu[1], cpu[2], script[0], script[1], script[2], per_rule, floor_cpu,
                floor_script, gcra_cpu, gcra_script);
  } else {
    std::printf("Redis per decision, consume_many in batches of 64: CPU %.2f / %.2f / %.2f us, "
                "script %.2f / %.2f / %.2f us with 1 / 4 / 16 rules; %.3f us of script per extra "
                "rule; the floor under a 1-rule decision (its record's and counter's commands "
                "alone): CPU %.2f us, script %.2f us; a record-less limiter (GCRA, one call a "
                "decision, 64 in flight): CPU %.2f us, script %.2f us\n",
                cpu[0], cpu[1], cpu[2], script[0], script[1], script[2], per_rule, floor_cpu,
                floor_script, gcra_cpu, gcra_script);
  }
}

// Redis CPU per decision when `threads` threads each call `consume` (single transactions, 1 and
// 4 rules, `threads` x `per_thread` consumes, the least of 3 rounds), and the decisions per
// second of that round: the library with merging off (`consume_in_flight` 0), at its default
// (1), with `consume_in_flight` 2 and 8 (the pool's size, the default before 0.2); raw hiredis
// sending the library's single-transaction script call on a connection per thread; and a
// record-less limiter (bench/lua/reference_gcra.lua, one call a decision) on a connection per
// thread, the cost a host pays for a peer's limiter called the same way. Also the script calls per
// decision: how many consumes each script call decided.
void server_cpu_threads(Bench& bench, bool json, int threads) {
  const std::uint64_t per_thread = threads >= 64 ? 100 : 400;
  const double decisions = double(threads) * double(per_thread);
  struct Side {
    const char* name;
    std::optional<std::size_t> in_flight; // unset: the default; raw sides: unused
    double cpu = 1e9;
    double calls = 0;
    double per_s = 0;
  };
  const std::string gcra = load_bench_script(bench, "reference_gcra.lua");
  std::uint64_t round_number = 0;
  for (const int rule_count : {1, 4}) {
    Side sides[] = {{"unmerged", 0},   {"default", std::nullopt},
                    {"in_flight2", 2}, {"in_flight8", 8},
                    {"hiredis", 0},    {"record_less_limiter", 0}};
    constexpr std::size_t raw_side = 4;
    constexpr std::size_t limiter_side = 5;
    const lc::RuleSet rules = consume_rules(rule_count);
    const auto now = lc::Clock::now();
    // Each round its own ids, so that nothing replays.
    const auto transaction = [&bench, now, &round_number](int t, std::uint64_t i) {
      lc::Transaction tx =
          bench_transaction(id("t", bench.nonce, t, round_number * 1'000'000 + i), 100, i % 50);
      tx.time = now;
      return tx;
    };
    std::vector<std::unique_ptr<lc::LimitCounter>> counters;
    for (std::size_t side = 0; side < raw_side; ++side) {
      lc::LimitCounterOptions options;
      options.key_prefix = "bench:" + bench.nonce + ":t" + std::to_string(threads) + "cpu" +
                           std::to_string(rule_count) + ":";
      options.consume_in_flight = sides[side].in_flight;
      counters.push_back(std::make_unique<lc::LimitCounter>(
          lc::Redis(bench.default_options), lc::Calendar("Asia/Shanghai"), options));
      counters.back()->set_rules(rules);
    }
    const auto raw_call = decide_calls(*counters[0], rules, now, transaction);
    std::vector<std::unique_ptr<RawClient>> raw;
    for (int t = 0; t < threads; ++t) {
      raw.push_back(std::make_unique<RawClient>(bench.options));
    }
    // 1 ms apart, a burst of 10^12 ms: never denied
    const auto limiter_call = [&bench, &gcra](int t, std::uint64_t i) {
      return std::vector<std::string>{
          "EVALSHA",
          gcra,
          "1",
          "bench:" + bench.nonce + ":gcra" + std::to_string(t) + ":m" + std::to_string(i % 50),
          "1",
          "1000000000000"};
    };
    for (int round = 0; round < 3; ++round) {
      for (std::size_t side = 0; side < std::size(sides); ++side) {
        ++round_number;
        std::atomic<int> failed{0};
        std::mutex first_failure_mutex;
        std::string first_failure = "denied";
        bench.redis.command({"CONFIG", "RESETSTAT"});
        const double before = server_cpu_usec(bench);
        const auto started = std::chrono::steady_clock::now();
        std::vector<std::thread> workers;
        for (int t = 0; t < threads; ++t) {
          workers.emplace_back([&, t] {
            RawClient& own = *raw[static_cast<std::size_t>(t)];
            for (std::uint64_t i = 0; i < per_thread; ++i) {
              try {
                if (side == raw_side) {
                  own.append(raw_call(t, i));
                  own.read(1);
                } else if (side == limiter_side) {
                  own.append(limiter_call(t, i));
                  failed += own.read(1) == 1 ? 0 : 1;
                } else if (!counters[side]->consume(transaction(t, i)).allowed()) {
                  ++failed;
                }
              } catch (const std::exception& e) {
                if (failed++ == 0) {
                  const std::lock_guard<std::mutex> lock(first_failure_mutex);
                  first_failure = e.what();
                }
              }
            }
          });
        }
        for (auto& worker : workers) {
          worker.join();
        }
        const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - started;
        const double used = server_cpu_usec(bench) - before;
        if (failed > 0) {
          throw std::runtime_error("consume_server_cpu_threads" + std::to_string(threads) + " (" +
                                   sides[side].name + "): " + std::to_string(failed) +
                                   " consumes failed or were denied, the first: " + first_failure);
        }
        const bench::ScriptStats stats =
            bench::script_stats(bench.redis.command({"INFO", "commandstats"}).as_string());
        Side& measured = sides[side];
        if (used / decisions < measured.cpu) {
          measured.cpu = used / decisions;
          measured.calls = stats.calls / decisions;
          measured.per_s = decisions / wall.count();
        }
      }
    }
    if (json) {
      std::printf("{\"scenario\": \"consume_%d_rules_server_cpu_threads%d\"", rule_count, threads);
      for (const Side& side : sides) {
        std::printf(", \"cpu_usec_%s\": %.2f, \"script_calls_per_decision_%s\": %.3f, "
                    "\"decisions_per_s_%s\": %.0f",
                    side.name, side.cpu, side.name, side.calls, side.name, side.per_s);
      }
      std::printf("}\n");
    } else {
      std::printf("Redis CPU per decision, %d threads calling consume (%d rule%s):", threads,
                  rule_count, rule_count == 1 ? "" : "s");
      for (const Side& side : sides) {
        std::printf(" %s %.2f us (%.3f script calls per decision, %.0f/s);", side.name, side.cpu,
                    side.calls, side.per_s);
      }
      std::printf("\n");
    }
  }
}

// Server time of a 4-rule consume (INFO commandstats) for each of `compared_buckets`, taking
// turns, with 100,000 merchants already counted in today's merchant window: one hashtable
// with 1 bucket, listpacks of about 98 or 24 fields with 1,024 or 4,096 buckets.
void server_time_buckets(Bench& bench, bool json) {
  const lc::RuleSet rules = consume_rules(4);
  constexpr std::size_t compared = std::size(compared_buckets);
  std::vector<std::unique_ptr<lc::LimitCounter>> counters;
  for (const std::uint32_t buckets : compared_buckets) {
    auto options = bucketed_options(bench, buckets);
    options.key_prefix += "t:";
    counters.push_back(
        std::make_unique<lc::LimitCounter>(bench.redis, lc::Calendar("Asia/Shanghai"), options));
    std::vector<lc::AddRequest> requests;
    for (int i = 0; i < 100'000; ++i) {
      requests.push_back({"merchant",
                          lc::Dimension{"m" + std::to_string(i)},
                          {lc::Period::day},
                          1,
                          100,
                          lc::Clock::now()});
      if (requests.size() == 1000) {
        counters.back()->add_many(requests);
        requests.clear();
      }
    }
  }
  std::vector<double> usec(compared, 1e9);
  std::uint64_t next_id = 0;
  for (int round = 0; round < 5; ++round) {
    for (std::size_t k = 0; k < compared; ++k) {
      usec[k] = least_usec_per_consume(bench, *counters[k], rules, "k" + std::to_string(k), next_id,
                                       usec[k], 100'000);
    }
  }
  for (std::size_t k = 0; k < compared; ++k) {
    if (json) {
      std::printf("{\"scenario\": \"consume_4_rules_server_time_buckets%u\", \"usec\": %.2f, "
                  "\"merchants\": 100000}\n",
                  compared_buckets[k], usec[k]);
    } else {
      std::printf("server time of a 4-rule consume, 100,000 merchants counted, %u bucket(s): "
                  "%.2f us\n",
                  compared_buckets[k], usec[k]);
    }
  }
}

} // namespace

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::cerr
        << "usage: limitcounter_bench <redis-uri> [--json] [--millis N] [--only SUBSTRING]\n"
           "       limitcounter_bench <redis-uri> --cluster <redis-cluster-uri> [--millis N]\n";
    return 2;
  }
  bool json = false;
  std::string only;
  std::string cluster_uri;
  std::chrono::milliseconds duration{1000};
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (std::strcmp(argv[i], "--millis") == 0 && i + 1 < argc) {
      duration = std::chrono::milliseconds{std::stoll(argv[++i])};
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else if (std::strcmp(argv[i], "--cluster") == 0 && i + 1 < argc) {
      cluster_uri = argv[++i];
    }
  }
  if (!cluster_uri.empty()) {
    bench::run_cluster_comparison(argv[1], cluster_uri, duration, thread_count);
    return 0;
  }
  lc::RedisOptions options = lc::RedisOptions::from_uri(argv[1]);
  options.command_timeout = 2000ms;
  options.pool_size = thread_count * 2;
  Bench bench{options,  lc::Redis(options),
              duration, std::to_string(lc::Clock::now().time_since_epoch().count()),
              {},       lc::RedisOptions::from_uri(argv[1])};
  lc::LimitCounterOptions counter_options;
  counter_options.key_prefix = "bench:" + bench.nonce + ":";
  lc::LimitCounter counter(bench.redis, lc::Calendar("Asia/Shanghai"), counter_options);
  for (const auto& script : lc::scripts::all) {
    bench.redis.command({"SCRIPT", "LOAD", std::string(script->source)});
  }
  const auto wanted = [&](const char* name) {
    return only.empty() || std::string(name).find(only) != std::string::npos;
  };
  if (wanted("counter_add") || wanted("sms_cap") || wanted("sliding_window")) {
    counter_scenarios(bench, counter);
  }
  for (const int rules : {1, 4, 16}) {
    if (wanted(("consume_" + std::to_string(rules) + "_rules").c_str())) {
      consume_scenario(bench, counter, rules, false);
    }
  }
  if (wanted("consume_1_rules_threads64") || wanted("sms_cap_threads64")) {
    // One Redis at every default option shared by 64 threads (own keys: no id repeats).
    lc::LimitCounterOptions defaults_options = counter_options;
    defaults_options.key_prefix += "t64:";
    lc::LimitCounter defaults(lc::Redis(bench.default_options), counter.calendar(),
                              defaults_options);
    if (wanted("consume_1_rules_threads64")) {
      consume_scenario(bench, defaults, 1, true);
    }
    if (wanted("sms_cap_threads64")) {
      cap_scenario(bench, defaults, true);
    }
  }
  if (wanted("exhausted_cache_off") || wanted("exhausted_cache_on")) {
    exhausted_scenarios(bench, counter_options);
  }
  if (wanted("wallet_deduct")) {
    wallet_scenario(bench);
  }
  if (wanted("red_packet_grab")) {
    grab_scenario(bench);
  }
  if (json) {
    bench::print_json(bench.rows);
  } else {
    bench::print_table(bench.rows);
  }
  if (wanted("memory") || wanted("counter_bytes")) {
    memory_per_counter(bench, json);
  }
  if (wanted("record_bytes")) {
    record_bytes(bench, json);
  }
  if (wanted("consume_server_cpu_batch64")) {
    server_cpu_batch64(bench, json);
  }
  for (const int threads : {16, 64}) {
    if (wanted(("consume_1_rules_server_cpu_threads" + std::to_string(threads)).c_str())) {
      server_cpu_threads(bench, json, threads);
    }
  }
  if (wanted("server_time")) {
    server_time_per_rule(bench, counter, json);
    server_time_buckets(bench, json);
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "limitcounter_bench: " << e.what() << '\n';
  return 1;
}
