// The Python objects the overflow guard hands facts to: given once, when the debugger is made, so
// nothing is looked up by name when an overflow happens. GIL required to use them.
#pragma once

#include <pybind11/pybind11.h>

namespace msprobe {

struct PythonSide {
  pybind11::object overflow_type;  // msprobe_cpp.Overflow(**facts): a notice's
  // msprobe_cpp.OverflowError: a stop's, made with its Overflow in one call (OverflowError._of).
  pybind11::object error_type;
  pybind11::object on_flagged;      // the debugger's callback, given a notice's Overflow
  pybind11::object queue_callback;  // torch.autograd.Variable._execution_engine.queue_callback
  // on_stop(overflow, notify): the debugger is told of this rank's stop before it is raised
  // (on_overflow where the stop is the step's first notice; under torch.distributed, the other
  // ranks, so that they stop too); raise_peer_stop: what a hook calls, to raise a peer's stop.
  pybind11::object on_stop;
  pybind11::object raise_peer_stop;
  // Collectives: tells the other ranks that this rank's input to `call` held NaN/inf; asks which
  // rank's input to `call` did (int or None).
  pybind11::object mark_collective_input;
  pybind11::object collective_input_rank;
  // replay(call, original, args, kwargs, dtype, gone) -> {"replay": [...], "not_replayed": ...}
  // (msprobe_cpp.replay.live_replay); original, args and kwargs are None when the call's
  // arguments are not held any more (`gone`: why, when it is known).
  pybind11::object replay;

  // Every member with its name, in one list: the keywords set_python_side takes, and what leak()
  // gives up, are this list.
  template <typename Fn>
  void each(Fn&& fn) {
    fn("overflow_type", overflow_type);
    fn("error_type", error_type);
    fn("on_flagged", on_flagged);
    fn("queue_callback", queue_callback);
    fn("on_stop", on_stop);
    fn("raise_peer_stop", raise_peer_stop);
    fn("mark_collective_input", mark_collective_input);
    fn("collective_input_rank", collective_input_rank);
    fn("replay", replay);
  }
  // Once the interpreter is gone the objects went with it: releasing them would touch freed
  // memory, so they are leaked on purpose (as torch's python_hook.cpp does). No GIL needed.
  void leak() {
    each([](const char*, pybind11::object& o) { o.release(); });
  }
};

}  // namespace msprobe
