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
#include <stdexcept>
#include <string>
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
  /// outcome in the job itself; it should not throw. If it does anyway, a job that ran alone
  /// gets that exception, and each job of a batch a std::runtime_error with its what() (an
  /// exception object is never shared between threads).
  template <typename RunBatch> void run(Job& job, RunBatch&& run_batch) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (queue_.empty() && in_flight_ < max_in_flight_) {
      // A place is free and nobody waits: this job runs alone, at once.
      ++in_flight_;
      lock.unlock();
      Job* const alone[] = {&job};
      try {
        run_batch(alone, std::size_t{1});
      } catch (...) {
        leave_alone();
        throw;
      }
      leave_alone();
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
      bool failed = false;
      std::string failure;
      try {
        run_batch(jobs.data(), jobs.size());
      } catch (const std::exception& e) {
        failed = true;
        failure = e.what();
      } catch (...) {
        failed = true;
        failure = "a batch failed with an exception that is not a std::exception";
      }
      lock.lock();
      --in_flight_;
      for (Entry* each : taken) {
        each->failed = failed;
        each->failure = failure;
        each->done = true; // its owner may return now: not touched after this
      }
      finished_.notify_all();
    }
    if (entry.failed) {
      throw std::runtime_error(entry.failure);
    }
  }

  /// Jobs waiting for a batch now (for tests).
  std::size_t queued() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return queue_.size();
  }

private:
  // The end of a job that ran alone: its place is free for a waiting caller.
  void leave_alone() {
    const std::lock_guard<std::mutex> lock(mutex_);
    --in_flight_;
    if (!queue_.empty()) {
      finished_.notify_all();
    }
  }

  struct Entry {
    Job* job = nullptr;
    bool done = false;
    bool failed = false;
    std::string failure; // what() of the batch's exception
  };

  const std::size_t max_in_flight_;
  const std::size_t max_batch_;
  std::mutex mutex_;
  std::condition_variable finished_;
  std::deque<Entry*> queue_;
  std::size_t in_flight_ = 0;
};

} // namespace limitcounter::detail
