#include "live/log/tool_log.h"

#include <atomic>
#include <cstdio>
#include <utility>

#include "live/crossing/python_crossing.h"

namespace msprobe {
namespace {

// Leaked: a line may be said while static objects are being destroyed.
MessageQueue& said() {
  static MessageQueue* queue = new MessageQueue;
  return *queue;
}

// Read and written with the GIL held. g_has_sink says, to a thread without it, whether Python
// still takes lines at all.
pybind11::handle g_sink;
std::atomic<bool> g_has_sink{false};
thread_local int t_queued_only = 0;

void to_stderr(const Message& m) {
  std::fprintf(stderr, "%s\n", m.text.c_str());
  std::fflush(stderr);
}

// With the GIL. An error already set (a hook's, on its way to Python) is kept aside and restored:
// saying a line must not change what the program raises.
void deliver_to_python() {
  PythonCrossing::KeptError kept;
  said().deliver([](const Message& m) {
    if (!g_sink) return to_stderr(m);
    const pybind11::object text = PythonCrossing::owned(
        PyUnicode_DecodeUTF8(m.text.data(), static_cast<Py_ssize_t>(m.text.size()), "replace"));
    const int level = static_cast<int>(m.level);
    const pybind11::object result = PythonCrossing::owned(
        text ? PyObject_CallFunction(g_sink.ptr(), "iO", level, text.ptr()) : nullptr);
    if (!result) {
      // The logger failed (logging reports its handlers' own errors): the line is not lost.
      PythonCrossing::drop_error();
      to_stderr(m);
    }
  });
}

}  // namespace

QueuedLinesOnly::QueuedLinesOnly() {
  ++t_queued_only;
}
QueuedLinesOnly::~QueuedLinesOnly() {
  --t_queued_only;
}

void say(LogLevel level, std::string text) {
  // A logging record ends its own line.
  while (!text.empty() && text.back() == '\n') text.pop_back();
  said().post({level, std::move(text)});
  if (t_queued_only > 0) return;
  if (!g_has_sink.load()) return said().deliver(to_stderr);
  PythonCrossing::Gil gil;
  deliver_to_python();
}

void say_warning(std::string text) {
  say(LogLevel::Warning, "msprobe_cpp: warning: " + text);
}

void deliver_said_lines() {
  PythonCrossing::assert_gil();
  // No look at the queue first: deliver() takes its lock once to find it empty.
  if (!g_has_sink.load()) return said().deliver(to_stderr);
  deliver_to_python();
}

void set_log_sink(pybind11::handle sink) {
  PythonCrossing::assert_gil();
  if (!sink) deliver_said_lines();  // the lines said so far still reach the logger
  PythonCrossing::let_go(std::exchange(g_sink, PythonCrossing::keep(sink)));
  g_has_sink.store(static_cast<bool>(g_sink));
}

}  // namespace msprobe
