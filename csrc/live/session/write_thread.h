// The thread that writes steps' files under `async_dump: true`: the training thread hands a
// finished step over and goes on with the next one. Jobs run one at a time, in order. At most one
// waits beside the one running: a step handed over sooner waits for room, so memory holds two
// steps' records at most, and a disk slower than the training slows the training instead of
// filling memory.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include <sys/types.h>

namespace msprobe {

class WriteThread {
 public:
  WriteThread() = default;
  ~WriteThread();  // runs every job handed over, then ends the thread
  WriteThread(const WriteThread&) = delete;
  WriteThread& operator=(const WriteThread&) = delete;

  // Jobs must not take the GIL: post() and drain() may be called with it held. In a process
  // forked after the thread started (a DataLoader worker), which has no such thread, the job
  // runs at once in the caller.
  void post(std::function<void()> job);
  // Returns once every job handed over has run.
  void drain();

 private:
  void run();

  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> jobs_;
  bool running_job_ = false;
  bool ending_ = false;
  std::thread thread_;  // started by the first post()
  pid_t owner_ = 0;     // the process that started it
};

}  // namespace msprobe
