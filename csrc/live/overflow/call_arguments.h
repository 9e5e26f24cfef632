// The arguments of an API call, for a replay at an op-origin stop (issue 23): the original
// function and the very argument objects. While the wrapper judges its call they are its own
// (CallArgumentsScope); a call judged later (batched sync) keeps them in HeldArguments until its
// batch is judged, with the versions of its input tensors, so that a replay can tell whether a
// later in-place write changed them.
#pragma once

#include <pybind11/pybind11.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "live/capture/live_tensors.h"
#include "live/crossing/python_crossing.h"

namespace msprobe {

struct CallArguments {
  const std::string* name;     // "Tensor.__mul__.3.forward"
  pybind11::handle original;  // the unhooked torch function
  pybind11::handle args;      // tuple
  pybind11::handle kwargs;    // dict or null
};

// Set by the API wrapper around the judging of its call (GIL held throughout): the innermost
// such call of this thread, or null.
inline const CallArguments*& current_call_arguments() {
  thread_local const CallArguments* current = nullptr;
  return current;
}

// Makes `args` the thread's current call for its lifetime.
class CallArgumentsScope {
 public:
  explicit CallArgumentsScope(const CallArguments* args) : saved_(current_call_arguments()) {
    current_call_arguments() = args;
  }
  ~CallArgumentsScope() { current_call_arguments() = saved_; }
  CallArgumentsScope(const CallArgumentsScope&) = delete;
  CallArgumentsScope& operator=(const CallArgumentsScope&) = delete;

 private:
  const CallArguments* saved_;
};

// A deferred call's arguments. Made and released with the GIL held (the wrapper, and the
// batch's judging under flush_deferred); the release takes it anyway, for a step cleared late.
class HeldArguments {
 public:
  HeldArguments(const CallArguments& a, const LiveTensors& live)
      : name_(*a.name),
        original_(pybind11::reinterpret_borrow<pybind11::object>(a.original)),
        args_(pybind11::reinterpret_borrow<pybind11::object>(a.args)),
        kwargs_(pybind11::reinterpret_borrow<pybind11::object>(a.kwargs)) {
    for (const auto* side : {&live.inputs, &live.kwargs}) {
      for (const LiveArg& arg : *side) {
        if (arg.tensor.defined()) versions_.emplace_back(arg.tensor, arg.tensor._version());
        for (const at::Tensor& t : arg.items) versions_.emplace_back(t, t._version());
      }
    }
  }
  ~HeldArguments() {
    if (!Py_IsInitialized()) {  // the interpreter is gone: nothing to release into
      original_.release();
      args_.release();
      kwargs_.release();
      return;
    }
    PythonCrossing::Gil gil;
    original_ = pybind11::object();
    args_ = pybind11::object();
    kwargs_ = pybind11::object();
  }
  HeldArguments(const HeldArguments&) = delete;
  HeldArguments& operator=(const HeldArguments&) = delete;

  const std::string& name() const { return name_; }
  CallArguments view() const { return {&name_, original_, args_, kwargs_}; }
  // Whether an input tensor was written in place after the call.
  bool inputs_written_since() const {
    for (const auto& [t, version] : versions_) {
      if (t._version() != version) return true;
    }
    return false;
  }

 private:
  std::string name_;
  pybind11::object original_, args_, kwargs_;
  std::vector<std::pair<at::Tensor, int64_t>> versions_;
};

// The held arguments of the deferred call whose stop is being raised on this thread (set by the
// batch's judging, taken by the replay). GIL required.
inline std::shared_ptr<HeldArguments>& raising_call_arguments() {
  PythonCrossing::assert_gil();
  thread_local std::shared_ptr<HeldArguments> held;
  return held;
}

}  // namespace msprobe
