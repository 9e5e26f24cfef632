#include "live/session/write_thread.h"

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
          }) {}

}  // namespace msprobe
