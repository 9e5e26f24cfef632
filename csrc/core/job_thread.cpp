#include "core/job_thread.h"

#include <algorithm>
#include <exception>
#include <utility>

#include <unistd.h>

namespace msprobe {

JobThread::JobThread(size_t waiting, ThreadGuard guard, ErrorSink on_error, JobPolling polling)
    : waiting_(std::max<size_t>(waiting, 1)),
      guard_(std::move(guard)),
      on_error_(std::move(on_error)),
      polling_(polling) {}

JobThread::~JobThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ending_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool JobThread::post(std::function<void()> job) {
  std::unique_lock<std::mutex> lock(mu_);
  if (thread_.joinable() && owner_ != getpid()) {
    lock.unlock();
    job();
    return false;
  }
  if (!thread_.joinable()) {
    owner_ = getpid();
    thread_ = std::thread([this] { run(); });
  }
  const bool waited = jobs_.size() >= waiting_;
  changed_.wait(lock, [&] { return jobs_.size() < waiting_; });
  jobs_.push_back(std::move(job));
  if (asleep_) ++wakeups_;
  if (asleep_ || polling_.interval.count() == 0) changed_.notify_all();
  return waited;
}

void JobThread::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!jobs_.empty()) changed_.notify_all();  // a polling thread starts them now
  changed_.wait(lock, [&] { return jobs_.empty() && !running_job_; });
}

size_t JobThread::wakeups() {
  std::lock_guard<std::mutex> lock(mu_);
  return wakeups_;
}

size_t JobThread::pending() {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size() + (running_job_ ? 1 : 0);
}

void JobThread::wait_for_job(std::unique_lock<std::mutex>& lock) {
  const auto ready = [&] { return ending_ || !jobs_.empty(); };
  if (polling_.interval.count() > 0) {
    const auto until = std::chrono::steady_clock::now() + polling_.linger;
    while (!ready() && std::chrono::steady_clock::now() < until) {
      changed_.wait_for(lock, polling_.interval);
    }
  }
  asleep_ = true;
  changed_.wait(lock, ready);
  asleep_ = false;
}

void JobThread::run() {
  const std::shared_ptr<void> guarded = guard_ ? guard_() : nullptr;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wait_for_job(lock);
    if (jobs_.empty()) return;  // ending, and everything handed over has run
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    running_job_ = true;
    changed_.notify_all();  // room for the next job
    lock.unlock();
    try {
      job();
    } catch (const std::exception& e) {
      if (on_error_) on_error_(e.what());
    } catch (...) {
      if (on_error_) on_error_("an exception of unknown type");
    }
    job = nullptr;  // what the job held is freed here, off the posting thread
    lock.lock();
    running_job_ = false;
    changed_.notify_all();
  }
}

}  // namespace msprobe
