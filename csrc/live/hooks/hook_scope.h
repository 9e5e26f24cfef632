// Per-thread state of the hooks: the re-entry depth (only the outermost hooked call is recorded)
// and the stack of enclosing module calls (for construct.json parents).
#pragma once

#include <Python.h>

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/record.h"
#include "core/selection.h"
#include "live/capture/call_stack.h"
#include "live/capture/live_tensors.h"

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

struct ModuleBackwardStart;  // module_backward.h

// A module forward in progress: its name and inputs, captured by the pre-hook.
struct OpenModuleCall {
  pybind11::handle module;  // identity only
  // The frame of the module's call (torch's _call_impl), one reference held (push/pop below): while
  // it is on the Python stack the call is open; a forward that raised has left it.
  pybind11::handle frame;
  std::string name;
  uint64_t epoch = 0;  // Session::epoch() when it was numbered
  Selected selected;
  bool listed = false;  // named in `list`: everything inside it is collected (level mix)
  std::vector<Entry> inputs;
  std::vector<std::pair<std::string, Entry>> kwargs;
  LiveTensors live;  // task overflow_check: inputs and kwargs, outputs added at the end
  StackPtr stack;
  std::optional<std::string> parent;
  std::shared_ptr<ModuleBackwardStart> backward;  // levels L0 and mix, with grad mode on
};

std::vector<OpenModuleCall>& open_module_calls();  // this thread's; read only through these:
// Opens a module call made from the current Python frame. GIL required.
void push_module_call(OpenModuleCall&& call);
// Closes the innermost open call of `module` and those opened inside it (they raised: their post
// hooks never ran); false when `module` has none open. GIL required.
bool pop_module_call(pybind11::handle module, OpenModuleCall& out);
// Forgets every open call (a new step: a forward cut short by an exception). GIL required.
void clear_module_calls();

// Name of the innermost module call in progress on this thread, if any.
std::optional<std::string> enclosing_module();

// A part of the step outside the model that construct.json names as a node of its own (msprobe
// 26.x's "optimizer"): while it runs on this thread, an API call outside every module call has
// it as its parent. Until leave_region(), or the module calls are cleared (a new step).
void enter_region(std::string name);
void leave_region();
// construct.json's parent of an API call starting now: the innermost module call, else the
// region this thread is in, if any.
std::optional<std::string> construct_parent();

// A call of a model given to start() (not itself recorded, as in msprobe): its class and the
// tensors it was given, for the guard (the damage rule judges what it returns; at L0, NaN/inf
// that none of its arguments brought in was made by its own code).
struct StartedModelCall {
  pybind11::handle module;  // identity only
  std::string class_name;
  std::vector<at::Tensor> args;
};
std::vector<StartedModelCall>& started_model_calls();  // this thread's, innermost last
// "the started model Net's own forward" while one runs on this thread and no module call is
// open inside it.
std::optional<std::string> started_model_forward();
// At L0: the code that encloses a module call, innermost first: each open module call and the
// started model's call, with the tensors each was given (LiveTensors::enclosing).
std::vector<LiveTensors::Enclosing> enclosing_calls();

// Whether a module named in `list` is running on this thread.
bool inside_listed_module();

}  // namespace msprobe
