// A thread that runs jobs one at a time, in the order they were handed over, while the thread
// that posts them goes on: the dump's writer (live/session/write_thread.h). The number of jobs
// waiting beside the one running is bounded, so a consumer slower than its producer slows the
// producer instead of filling memory; post() says when it had to wait, for its caller to tell.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <sys/types.h>

namespace msprobe {

// How an idle thread waits for its next job. Waking a thread that sleeps costs the thread that
// wakes it a futex call, and on a virtual machine an interrupt to the idle core: about 40 us
// of the training thread's time per step, measured (docs/decisions.md). A polling thread
// looks for jobs every `interval` itself while jobs keep coming (`linger` after the last),
// and post() wakes it only once it has gone to sleep. Zero interval: post() always wakes it.
struct JobPolling {
  std::chrono::microseconds interval{0};
  std::chrono::milliseconds linger{0};
};

class JobThread {
 public:
  // Made on the thread when it starts, kept while it runs (a thread-local setting's guard).
  using ThreadGuard = std::function<std::shared_ptr<void>()>;
  // A job's exception, as text: a thread's exception would end the process.
  using ErrorSink = std::function<void(const std::string&)>;

  // `waiting`: how many jobs may wait beside the running one (at least 1).
  JobThread(size_t waiting, ThreadGuard guard, ErrorSink on_error, JobPolling polling = {});
  ~JobThread();  // runs every job handed over, then ends the thread
  JobThread(const JobThread&) = delete;
  JobThread& operator=(const JobThread&) = delete;

  // Queues `job`, once fewer than `waiting` jobs wait; true when it had to wait for room. In a
  // process forked after the thread started (a DataLoader worker), which has no such thread, the
  // job runs at once in the caller.
  bool post(std::function<void()> job);
  // Returns once every job handed over has run.
  void drain();
  // Jobs queued or running now.
  size_t pending();
  // How many times post() woke the thread from its sleep.
  size_t wakeups();

 private:
  void run();
  // Returns with the lock held, once there is a job or the thread is ending.
  void wait_for_job(std::unique_lock<std::mutex>& lock);

  const size_t waiting_;
  const ThreadGuard guard_;
  const ErrorSink on_error_;
  const JobPolling polling_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> jobs_;
  bool running_job_ = false;
  bool ending_ = false;
  bool asleep_ = false;  // waiting with no timeout: only a post() or the end wakes it
  size_t wakeups_ = 0;
  std::thread thread_;  // started by the first post()
  pid_t owner_ = 0;     // the process that started it
};

// What a thread that handed a job over waits on: the job sets it when it is done. Reset for the
// next job (check's regions and files are reused with their storage).
class JobLatch {
 public:
  void reset() {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = false;
  }
  void set() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    changed_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return done_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  bool done_ = false;
};

}  // namespace msprobe
