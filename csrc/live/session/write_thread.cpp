#include "live/session/write_thread.h"

#include <chrono>
#include <memory>
#include <string>

#include "live/log/tool_log.h"

namespace msprobe {

WriteThread::WriteThread(size_t waiting)
    : jobs_(
          waiting,
          // Jobs must not take the GIL: their lines wait for a thread that holds it.
          [] { return std::make_shared<QueuedLinesOnly>(); },
          [](const std::string& what) {
            say(LogLevel::Error, "msprobe_cpp: a step's dump could not be written: " + what);
          },
          // A job a step: the thread looks for the next itself, so that handing it over costs
          // the training thread no wake-up while steps keep coming.
          JobPolling{std::chrono::microseconds(1000), std::chrono::milliseconds(500)}) {}

}  // namespace msprobe
