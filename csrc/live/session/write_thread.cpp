#include "live/session/write_thread.h"

#include <exception>
#include <utility>

#include <unistd.h>

#include "live/log/tool_log.h"

namespace msprobe {

namespace {
constexpr size_t kWaitingJobs = 1;
}  // namespace

WriteThread::~WriteThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ending_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void WriteThread::post(std::function<void()> job) {
  std::unique_lock<std::mutex> lock(mu_);
  if (thread_.joinable() && owner_ != getpid()) {
    lock.unlock();
    return job();
  }
  if (!thread_.joinable()) {
    owner_ = getpid();
    thread_ = std::thread([this] { run(); });
  }
  changed_.wait(lock, [&] { return jobs_.size() < kWaitingJobs; });
  jobs_.push_back(std::move(job));
  changed_.notify_all();
}

void WriteThread::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] { return jobs_.empty() && !running_job_; });
}

void WriteThread::run() {
  // Jobs must not take the GIL: their lines wait for a thread that holds it.
  QueuedLinesOnly queued;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    changed_.wait(lock, [&] { return ending_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // ending, and everything handed over has run
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    running_job_ = true;
    changed_.notify_all();  // room for the next step
    lock.unlock();
    try {
      job();
    } catch (const std::exception& e) {
      // A thread's exception would end the process: the training goes on, as it does when a
      // synchronous write fails.
      say(LogLevel::Error,
          std::string("msprobe_cpp: a step's dump could not be written: ") + e.what());
    }
    job = nullptr;  // the step's records are freed here, off the training thread
    lock.lock();
    running_job_ = false;
    changed_.notify_all();
  }
}

}  // namespace msprobe
