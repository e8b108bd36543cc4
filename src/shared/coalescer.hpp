#pragma once
// Concurrent single calls merged into batches (group commit). While `max_in_flight` batches
// are running, a caller's job waits in a queue; the next caller to find a batch's place free
// takes every queued job (oldest first, up to `max_batch`) and runs them as one batch. So one
// caller at a time runs its job alone and at once, and under load the server's cost per
// command is paid once per batch instead of once per job.

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <mutex>
#include <vector>

namespace limitcounter::detail {

/// `Job` is the caller's own object: it lives on the caller's stack until `run` returns.
template <typename Job> class Coalescer {
public:
  Coalescer(std::size_t max_in_flight, std::size_t max_batch)
      : max_in_flight_(max_in_flight < 1 ? 1 : max_in_flight),
        max_batch_(max_batch < 1 ? 1 : max_batch) {}

  /// Returns once `job` has run, in a batch that this thread or another ran:
  /// `run_batch(Job* const* jobs, std::size_t count)` runs the batch and records each job's
  /// outcome in the job itself. An exception from `run_batch` is each job's of that batch:
  /// rethrown by `run`.
  template <typename RunBatch> void run(Job& job, RunBatch&& run_batch) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (queue_.empty() && in_flight_ < max_in_flight_) {
      // A place is free and nobody waits: this job runs alone, at once.
      ++in_flight_;
      lock.unlock();
      Job* const alone[] = {&job};
      const std::exception_ptr failure = run_guarded(run_batch, alone, 1);
      lock.lock();
      --in_flight_;
      if (!queue_.empty()) {
        finished_.notify_all(); // a waiting caller may take the place now
      }
      lock.unlock();
      if (failure) {
        std::rethrow_exception(failure);
      }
      return;
    }
    Entry entry;
    entry.job = &job;
    queue_.push_back(&entry);
    while (!entry.done) {
      if (in_flight_ >= max_in_flight_ || queue_.empty()) {
        finished_.wait(lock);
        continue;
      }
      std::vector<Entry*> taken;
      std::vector<Job*> jobs;
      while (!queue_.empty() && taken.size() < max_batch_) {
        taken.push_back(queue_.front());
        jobs.push_back(queue_.front()->job);
        queue_.pop_front();
      }
      ++in_flight_;
      lock.unlock();
      const std::exception_ptr failure = run_guarded(run_batch, jobs.data(), jobs.size());
      lock.lock();
      --in_flight_;
      for (Entry* each : taken) {
        each->failure = failure;
        each->done = true; // its owner may return now: not touched after this
      }
      finished_.notify_all();
    }
    if (entry.failure) {
      std::rethrow_exception(entry.failure);
    }
  }

  /// Jobs waiting for a batch now (for tests).
  std::size_t queued() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return queue_.size();
  }

private:
  template <typename RunBatch>
  static std::exception_ptr run_guarded(RunBatch& run_batch, Job* const* jobs, std::size_t count) {
    try {
      run_batch(jobs, count);
      return nullptr;
    } catch (...) {
      return std::current_exception();
    }
  }

  struct Entry {
    Job* job = nullptr;
    std::exception_ptr failure;
    bool done = false;
  };

  const std::size_t max_in_flight_;
  const std::size_t max_batch_;
  std::mutex mutex_;
  std::condition_variable finished_;
  std::deque<Entry*> queue_;
  std::size_t in_flight_ = 0;
};

} // namespace limitcounter::detail
