#include "driver.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

namespace bench {

Measurement measure(int threads, std::chrono::milliseconds duration, int ops_per_call,
                    const std::function<void(int thread, std::uint64_t i)>& op) {
  using Clock = std::chrono::steady_clock;
  std::atomic<bool> stop{false};
  std::vector<std::vector<double>> latencies(static_cast<std::size_t>(threads));
  std::vector<std::thread> workers;
  const auto start = Clock::now();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      auto& mine = latencies[static_cast<std::size_t>(t)];
      mine.reserve(1 << 16);
      for (std::uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        const auto before = Clock::now();
        op(t, i);
        mine.push_back(std::chrono::duration<double, std::micro>(Clock::now() - before).count());
      }
    });
  }
  std::this_thread::sleep_for(duration);
  stop = true;
  for (auto& worker : workers) {
    worker.join();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (const auto& mine : latencies) {
    all.insert(all.end(), mine.begin(), mine.end());
  }
  Measurement m;
  if (all.empty()) {
    return m;
  }
  std::sort(all.begin(), all.end());
  m.ops_per_s = static_cast<double>(all.size()) * ops_per_call / seconds;
  m.p50_us = all[all.size() / 2];
  m.p99_us = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  return m;
}

void print_table(const std::vector<Row>& rows) {
  std::printf("%-34s %12s %9s %9s %12s %9s %7s %13s\n", "scenario", "lib ops/s", "p50 us", "p99 us",
              "hiredis ops/s", "p99 us", "ratio", "failures l/h");
  for (const auto& row : rows) {
    std::printf("%-34s %12.0f %9.1f %9.1f %12.0f %9.1f %7.3f %6llu/%-6llu\n", row.scenario.c_str(),
                row.library.ops_per_s, row.library.p50_us, row.library.p99_us,
                row.baseline.ops_per_s, row.baseline.p99_us,
                row.library.ops_per_s / row.baseline.ops_per_s,
                static_cast<unsigned long long>(row.library.failures),
                static_cast<unsigned long long>(row.baseline.failures));
  }
}

void print_json(const std::vector<Row>& rows) {
  for (const auto& row : rows) {
    std::printf(
        "{\"scenario\": \"%s\", \"ops_per_s\": %.0f, \"p50_us\": %.2f, \"p99_us\": %.2f, "
        "\"baseline_ops_per_s\": %.0f, \"baseline_p50_us\": %.2f, \"baseline_p99_us\": %.2f, "
        "\"ratio\": %.4f, \"failures\": %llu, \"baseline_failures\": %llu}\n",
        row.scenario.c_str(), row.library.ops_per_s, row.library.p50_us, row.library.p99_us,
        row.baseline.ops_per_s, row.baseline.p50_us, row.baseline.p99_us,
        row.library.ops_per_s / row.baseline.ops_per_s,
        static_cast<unsigned long long>(row.library.failures),
        static_cast<unsigned long long>(row.baseline.failures));
  }
}

ScriptStats script_stats(const std::string& commandstats) {
  ScriptStats stats;
  for (const char* command : {"cmdstat_evalsha:", "cmdstat_fcall:"}) {
    const auto line = commandstats.find(command);
    if (line == std::string::npos) {
      continue;
    }
    const auto end = commandstats.find('\n', line);
    const std::string fields = commandstats.substr(line, end - line);
    stats.calls += std::stod(fields.substr(fields.find("calls=") + 6));
    stats.usec += std::stod(fields.substr(fields.find("usec=") + 5));
  }
  return stats;
}

} // namespace bench
