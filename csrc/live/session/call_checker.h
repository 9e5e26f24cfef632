// A task that runs the selected API calls itself instead of recording them: free_benchmark runs
// each one again on perturbed inputs and compares (msprobe 26.x's acc_check would be another).
// The task registers its checker in the session's hook context when it is made; the API hooks
// hand it each call (api_hook.cpp), and the recording tasks have none. The session owns it: a
// new debugger's session replaces it, and no task keeps a global slot of its own.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "core/function_ref.h"

namespace msprobe {

// A call on its way through the checker: what the hook knows of it.
struct CheckedCall {
  const std::string& api;            // "Torch.add"
  const std::string& name;           // "Torch.add.0.forward"
  const pybind11::object& original;  // the API itself
  // Calls it as the hook calls it (a peer's stop explains a collective's failure).
  FunctionRef<pybind11::object(pybind11::handle, pybind11::handle)> call_original;
  pybind11::tuple args;
  pybind11::dict kwargs;
};

class CallChecker {
 public:
  virtual ~CallChecker() = default;
  // Runs the call and returns what the program gets. GIL required (the hook's reentry guard is
  // on: what the checker calls is not hooked again).
  virtual pybind11::object call(const CheckedCall& call) = 0;
};

}  // namespace msprobe
