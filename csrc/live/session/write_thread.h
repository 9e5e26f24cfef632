// The threads that write the tool's files beside the training (a dump's steps, the monitor's
// CSVs, grad_probe's files): a JobThread (core/job_thread.h) whose lines wait for a thread that
// holds the GIL, and whose failed job is said, never raised: the training goes on, as it does
// when a synchronous write fails.
#pragma once

#include <cstddef>
#include <functional>

#include "core/job_thread.h"

namespace msprobe {

class WriteThread {
 public:
  // `waiting`: jobs that may wait beside the one being written; a job handed over sooner waits
  // for room, so memory holds waiting + 1 jobs at most, and a disk slower than the training slows
  // the training instead of filling memory.
  explicit WriteThread(size_t waiting = 1);

  // Jobs must not take the GIL: post() and drain() may be called with it held. True when the
  // caller had to wait for room.
  bool post(std::function<void()> job) { return jobs_.post(std::move(job)); }
  // Returns once every job handed over has run.
  void drain() { jobs_.drain(); }

 private:
  JobThread jobs_;  // its destructor runs every job handed over, then ends the thread
};

}  // namespace msprobe
