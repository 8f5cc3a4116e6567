// The session's worker: runs jobs off the UI thread, one at a time, so that the window keeps
// drawing the last result while a new one is computed. Generic over the job and its result; a
// job has `parts` (bits of what it computes).
//   post      a newer job replaces the one queued (and owes its parts too); it cancels the job in
//             flight when it computes every part that one does (the latest request wins)
//   take      the finished results, oldest first, on the UI thread (what the session adopts)
//   progress  the job in flight writes it (RunOptions::progress), 0..1; cancel_flag likewise
// Without start() (sync mode: tests, headless screenshots, the redraw benchmark) post runs the
// job at once on the calling thread and returns its result.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace attnlab::viewer {

template <class Job, class Result>
class Worker {
 public:
  using Run = std::function<Result(Job)>;
  explicit Worker(Run run) : run_(std::move(run)) {}
  ~Worker() { stop(); }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // The thread of async mode; posts made before it ran synchronously.
  void start() {
    async_ = true;
    thread_ = std::thread([this] { loop(); });
  }
  // Cancels the job in flight, drops the queued one and joins (the destructor's).
  void stop() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
      cancel_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  bool async() const { return async_; }

  // Async: queues `job` (see above) and returns nothing; sync: runs it now and returns its result.
  std::optional<Result> post(Job job) {
    if (!async_) return run_(std::move(job));
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (pending_) job.parts |= pending_->parts;  // what was queued is still owed
      if (running_ != 0 && (running_ & ~job.parts) == 0) cancel_ = true;
      pending_ = std::move(job);
    }
    wake_.notify_all();
    return std::nullopt;
  }
  std::deque<Result> take() {
    std::deque<Result> out;
    std::lock_guard<std::mutex> lk(mu_);
    out.swap(done_);
    return out;
  }
  // Until nothing is queued or running (the results stay for take()).
  void wait_idle() {
    if (!async_) return;
    std::unique_lock<std::mutex> lk(mu_);
    idle_.wait(lk, [this] { return !pending_ && running_ == 0; });
  }
  // A job is queued, in flight, or finished and not taken yet.
  bool busy() const {
    std::lock_guard<std::mutex> lk(mu_);
    return pending_.has_value() || running_ != 0 || !done_.empty();
  }
  const std::atomic<bool>* cancel_flag() const { return &cancel_; }
  std::atomic<float>* progress() { return &progress_; }
  float progress_value() const { return progress_.load(); }

 private:
  void loop() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      wake_.wait(lk, [this] { return stop_ || pending_.has_value(); });
      if (stop_) return;
      Job job = std::move(*pending_);
      pending_.reset();
      running_ = job.parts;
      cancel_ = false;
      lk.unlock();
      Result r = run_(std::move(job));
      lk.lock();
      running_ = 0;
      done_.push_back(std::move(r));
      idle_.notify_all();
    }
  }

  Run run_;
  bool async_ = false;
  mutable std::mutex mu_;
  std::condition_variable wake_, idle_;
  std::optional<Job> pending_;
  unsigned running_ = 0;  // parts of the job in flight (0: none)
  std::deque<Result> done_;
  bool stop_ = false;
  std::atomic<bool> cancel_{false};
  std::atomic<float> progress_{0};
  std::thread thread_;
};

}  // namespace attnlab::viewer
