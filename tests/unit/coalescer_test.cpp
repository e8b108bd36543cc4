// detail::Coalescer: concurrent jobs merged into batches (group commit), without a server.
#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "shared/coalescer.hpp"

namespace {

struct Job {
  int id = 0;
  int result = 0;
};

// Batches as the runner saw them, by job id.
struct Recorder {
  std::mutex mutex;
  std::vector<std::vector<int>> batches;
  void note(Job* const* jobs, std::size_t count) {
    std::vector<int> ids;
    for (std::size_t i = 0; i < count; ++i) {
      ids.push_back(jobs[i]->id);
    }
    const std::lock_guard<std::mutex> lock(mutex);
    batches.push_back(ids);
  }
};

// Holds the first batches until released, so that later callers queue behind them.
struct Gate {
  std::mutex mutex;
  std::condition_variable changed;
  std::size_t entered = 0;
  bool open = false;
  void pass() {
    std::unique_lock<std::mutex> lock(mutex);
    ++entered;
    changed.notify_all();
    changed.wait(lock, [&] { return open; });
  }
  void wait_entered(std::size_t n = 1) {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return entered >= n; });
  }
  void release() {
    const std::lock_guard<std::mutex> lock(mutex);
    open = true;
    changed.notify_all();
  }
};

template <typename Coalescer> void wait_queued(Coalescer& coalescer, std::size_t n) {
  while (coalescer.queued() < n) {
    std::this_thread::yield();
  }
}

// Starts one caller per job (ids 1, 2, ...), each running `call(i)`: the first `in_flight`
// each run alone and hold their batch at `gate`, the others arrive one at a time, each once the
// one before it queued. Then opens the gate and joins them.
template <typename Coalescer, typename Call>
void arrive_in_order(Coalescer& coalescer, std::vector<Job>& jobs, std::size_t in_flight,
                     Gate& gate, Call&& call) {
  std::vector<std::thread> callers;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].id = static_cast<int>(i + 1);
    callers.emplace_back([&call, i] { call(i); });
    if (i < in_flight) {
      gate.wait_entered(i + 1);
    } else {
      wait_queued(coalescer, i + 1 - in_flight);
    }
  }
  gate.release();
  for (auto& caller : callers) {
    caller.join();
  }
}

} // namespace

using limitcounter::detail::Coalescer;

TEST_CASE("a lone caller's job runs alone, at once, on the caller's thread", "[unit][coalescer]") {
  Coalescer<Job> coalescer(1, 64);
  Recorder recorder;
  for (int id = 1; id <= 3; ++id) {
    Job job{id};
    std::thread::id ran_on;
    coalescer.run(job, [&](Job* const* jobs, std::size_t count) {
      ran_on = std::this_thread::get_id();
      recorder.note(jobs, count);
      for (std::size_t i = 0; i < count; ++i) {
        jobs[i]->result = jobs[i]->id * 10;
      }
    });
    CHECK(job.result == id * 10);
    CHECK(ran_on == std::this_thread::get_id());
  }
  CHECK(recorder.batches == std::vector<std::vector<int>>{{1}, {2}, {3}});
  CHECK(coalescer.queued() == 0);
}

TEST_CASE("jobs that come while the batches in flight are at their limit go in one batch, "
          "oldest first, each with its own result",
          "[unit][coalescer]") {
  const std::size_t in_flight = GENERATE(1, 2);
  Coalescer<Job> coalescer(in_flight, 64);
  Recorder recorder;
  Gate gate;
  auto run_batch = [&](Job* const* jobs, std::size_t count) {
    recorder.note(jobs, count);
    if (jobs[0]->id <= static_cast<int>(in_flight)) {
      gate.pass(); // the first batches stay in flight until the others queued
    }
    for (std::size_t i = 0; i < count; ++i) {
      jobs[i]->result = jobs[i]->id * 10;
    }
  };
  std::vector<Job> jobs(in_flight + 5);
  arrive_in_order(coalescer, jobs, in_flight, gate,
                  [&](std::size_t i) { coalescer.run(jobs[i], run_batch); });
  for (const Job& job : jobs) {
    CHECK(job.result == job.id * 10);
  }
  REQUIRE(recorder.batches.size() == in_flight + 1);
  std::vector<int> queued_ids;
  for (std::size_t i = in_flight; i < jobs.size(); ++i) {
    queued_ids.push_back(static_cast<int>(i + 1));
  }
  CHECK(recorder.batches.back() == queued_ids);
  CHECK(coalescer.queued() == 0);
}

TEST_CASE("a batch takes at most max_batch jobs; the rest go in the next", "[unit][coalescer]") {
  Coalescer<Job> coalescer(1, 2);
  Recorder recorder;
  Gate gate;
  auto run_batch = [&](Job* const* jobs, std::size_t count) {
    recorder.note(jobs, count);
    if (jobs[0]->id == 1) {
      gate.pass();
    }
  };
  std::vector<Job> jobs(6);
  arrive_in_order(coalescer, jobs, 1, gate,
                  [&](std::size_t i) { coalescer.run(jobs[i], run_batch); });
  CHECK(recorder.batches == std::vector<std::vector<int>>{{1}, {2, 3}, {4, 5}, {6}});
}

TEST_CASE("an exception of a batch is thrown to every caller of that batch, and only to them",
          "[unit][coalescer]") {
  Coalescer<Job> coalescer(1, 64);
  Gate gate;
  auto run_batch = [&](Job* const* jobs, std::size_t count) {
    if (jobs[0]->id == 1) {
      gate.pass();
      return; // the first batch succeeds
    }
    throw std::runtime_error("batch of " + std::to_string(count) + " failed");
  };
  std::vector<Job> jobs(4);
  std::atomic<int> thrown{0};
  std::vector<std::string> messages(jobs.size());
  arrive_in_order(coalescer, jobs, 1, gate, [&](std::size_t i) {
    try {
      coalescer.run(jobs[i], run_batch);
    } catch (const std::runtime_error& e) {
      ++thrown;
      messages[i] = e.what();
    }
  });
  CHECK(thrown == 3);
  CHECK(messages == std::vector<std::string>{"", "batch of 3 failed", "batch of 3 failed",
                                             "batch of 3 failed"});
}
