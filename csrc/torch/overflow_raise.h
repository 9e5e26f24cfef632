// Where the overflow guard crosses into Python: debugger.overflow and on_overflow, the callback
// queued on the autograd engine at the end of a backward pass, and the OverflowError itself.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
#include <string>

#include "torch/session.h"

namespace msprobe {

struct PythonSide {
  pybind11::object overflow_type;   // msprobe_cpp.Overflow(**facts)
  pybind11::object error_type;      // msprobe_cpp.OverflowError(message, overflow)
  pybind11::object on_flagged;      // the debugger's callback, given an Overflow
  pybind11::object queue_callback;  // torch.autograd.Variable._execution_engine.queue_callback
  // torch.distributed (None otherwise): told of this rank's stop before it is raised, so that
  // every other rank stops too; and what a hook calls, to raise the stop of a peer.
  pybind11::object on_stop;
  pybind11::object raise_peer_stop;
  // Collectives: tells the other ranks that this rank's input to `call` held NaN/inf; asks which
  // rank's input to `call` did (int or None).
  pybind11::object mark_collective_input;
  pybind11::object collective_input_rank;
};

// Collectives under torch.distributed (nothing, or nullopt, without a peer side). GIL required.
void mark_anomalous_collective_input(Session& session, const std::string& call);
std::optional<int> anomalous_collective_input_rank(Session& session, const std::string& call);

// A peer rank stopped: raises its stop here (GIL required). Nothing when there is no peer side.
void raise_peer_stop(Session& session);

// Does what `event` says: tells the debugger, queues the end-of-backward check, raises. A raise
// throws pybind11::error_already_set with msprobe_cpp.OverflowError set, after the step's files
// are written. GIL required.
void handle_overflow_event(Session& session, const OverflowEvent& event);

// Batched sync: asks the autograd engine to judge the queued calls when the backward pass ends.
// GIL required.
void queue_backward_flush(Session& session);

// The facts as a msprobe_cpp.Overflow object. GIL required.
pybind11::object overflow_object(const PythonSide& side, const OverflowFacts& facts);

}  // namespace msprobe
