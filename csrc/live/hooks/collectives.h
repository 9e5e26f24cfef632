// torch.distributed's in-place collectives: they return None (or a work handle) and write their
// result into an argument, so that argument, read after the call, is the call's output.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

namespace msprobe {

// Where a collective writes its result: a positional index and the keyword of the same
// argument. Index -1: `api` ("Distributed.all_reduce") is no in-place collective.
struct WrittenArgument {
  int index = -1;
  const char* keyword = "";
  // The call reads the buffer too (all_reduce): else what it holds before the call is no input
  // (an all-gather's torch.empty buffer) and is never judged.
  bool read = false;
};
WrittenArgument written_argument(const std::string& api);

// The argument itself in a call, or null when the call did not pass it.
pybind11::handle written_buffer(const WrittenArgument& w, PyObject* args, PyObject* kwargs);

}  // namespace msprobe
