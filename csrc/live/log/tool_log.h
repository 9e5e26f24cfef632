// Every line the tool says reaches Python's logging, logger "msprobe_cpp" (msprobe_cpp/log.py), in
// the order said. GIL: say() may be called on any thread, with or without the GIL. A thread that
// holds it delivers at once. The autograd engine's threads take it to deliver, as they do for a
// source line, so a stop's line is out before the stop goes on. The dump writer's threads never
// take it (a thread holding the GIL may be waiting for their write): their lines wait for the next
// deliver_said_lines() of a thread that has it. Lock: never call with a lock that a thread holding
// the GIL may wait for.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "core/message_queue.h"

namespace msprobe {

void say(LogLevel level, std::string text);
void say_warning(std::string text);  // "msprobe_cpp: warning: " + text

// The lines queued by threads that may not take the GIL. GIL required.
void deliver_said_lines();

// While one lives, this thread's lines are queued, never delivered by it.
class QueuedLinesOnly {
 public:
  QueuedLinesOnly();
  ~QueuedLinesOnly();
  QueuedLinesOnly(const QueuedLinesOnly&) = delete;
  QueuedLinesOnly& operator=(const QueuedLinesOnly&) = delete;
};

// `sink(level, text)` delivers a line (a new reference is kept); a null handle takes it back,
// and the lines go to stderr from then on, as at exit. GIL required.
void set_log_sink(pybind11::handle sink);

}  // namespace msprobe
