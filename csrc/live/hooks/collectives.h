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
  // The call returns the rank it received from (recv), not its result: the buffer is the output.
  bool returns_source = false;
};
WrittenArgument written_argument(const std::string& api);

// The argument itself in a call, or null when the call did not pass it.
pybind11::handle written_buffer(const WrittenArgument& w, pybind11::handle args,
                                pybind11::handle kwargs);

// Point-to-point calls have no common name on both ranks to tell a NaN/inf input by: a send tells
// it under "p2p>DST" (empty for any other call, or a destination that is not an int), and the
// receive that pairs with it looks under "p2p<SRC", SRC being what recv returned. peer_stop.py
// turns both into the same store key.
std::string sent_input_key(const std::string& api, pybind11::handle args,
                           pybind11::handle kwargs);
std::string received_key(pybind11::handle source);

}  // namespace msprobe
