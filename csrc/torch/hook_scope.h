// Per-thread state of the hooks: the re-entry depth (only the outermost hooked call is recorded)
// and the stack of enclosing module calls (for construct.json parents).
#pragma once

#include <Python.h>

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

#include "core/record.h"
#include "core/selection.h"
#include "torch/call_stack.h"
#include "torch/live_tensors.h"

namespace msprobe {

class ReentryGuard {
 public:
  ReentryGuard() { ++depth(); }
  ~ReentryGuard() { --depth(); }
  ReentryGuard(const ReentryGuard&) = delete;
  ReentryGuard& operator=(const ReentryGuard&) = delete;
  static bool inside() { return depth() > 0; }

 private:
  static int& depth() {
    thread_local int d = 0;
    return d;
  }
};

// A module forward in progress: its name and inputs, captured by the pre-hook.
struct OpenModuleCall {
  PyObject* module;  // identity only
  std::string name;
  Selected selected;
  bool listed = false;  // named in `list`: everything inside it is collected (level mix)
  std::vector<Entry> inputs;
  std::vector<std::pair<std::string, Entry>> kwargs;
  std::vector<LiveArg> live_inputs;  // task overflow_check
  StackPtr stack;
  std::optional<std::string> parent;
};

std::vector<OpenModuleCall>& open_module_calls();  // this thread's

// Name of the innermost module call in progress on this thread, if any.
std::optional<std::string> enclosing_module();

// Whether a module named in `list` is running on this thread.
bool inside_listed_module();

}  // namespace msprobe
