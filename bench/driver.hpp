#pragma once
// The benchmark driver: runs an operation for a while, one or many threads at a time,
// and reports throughput and latency percentiles.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace bench {

struct Measurement {
  double ops_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  /// Calls that threw (counted by the `_threads64` rows only; other rows stop at an error).
  std::uint64_t failures = 0;
};

/// Calls `op(thread, i)` with i = 0, 1, 2, ... on `threads` threads for about `duration`.
/// One call may perform `ops_per_call` operations (a batch); latency is per call.
Measurement measure(int threads, std::chrono::milliseconds duration, int ops_per_call,
                    const std::function<void(int thread, std::uint64_t i)>& op);

/// One result line: the library's measurement, the baseline's, and their ratio.
struct Row {
  std::string scenario;
  Measurement library;
  Measurement baseline;
};

void print_table(const std::vector<Row>& rows);
void print_json(const std::vector<Row>& rows);

/// Script calls and their time in an `INFO commandstats` text: EVALSHA and FCALL together (the
/// library runs lua/limit.lua by FCALL, the raw hiredis sides and reference scripts by EVALSHA).
struct ScriptStats {
  double calls = 0;
  double usec = 0;
};
ScriptStats script_stats(const std::string& commandstats);

} // namespace bench
