// The API call this thread is inside, while it is being judged: what a replay at an op-origin
// stop needs (the original function and the very arguments), held by the wrapper's frame.
#pragma once

#include <Python.h>

#include <string>

namespace msprobe {

struct CallArguments {
  const std::string* name;  // "Tensor.__mul__.3.forward"
  PyObject* original;       // the unhooked torch function
  PyObject* args;           // tuple
  PyObject* kwargs;         // dict or null
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

}  // namespace msprobe
