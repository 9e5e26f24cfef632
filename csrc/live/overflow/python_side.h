// Where the overflow guard crosses into Python: debugger.overflow and on_overflow, the callback
// queued on the autograd engine at the end of a backward pass, the replay, the peer side and the
// OverflowError itself. It decides nothing: the events it carries out come from the guard and
// from session/overflow_control.h.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <vector>

#include "live/overflow/python_objects.h"
#include "live/session/session.h"

namespace msprobe {

// Collectives under torch.distributed (nothing, or nullopt, without a peer side). GIL required.
void mark_anomalous_collective_input(Session& session, const std::string& call);
std::optional<int> anomalous_collective_input_rank(Session& session, const std::string& call);

// A peer rank stopped: raises its stop here (GIL required). Nothing when there is no peer side.
void raise_peer_stop(Session& session);

// Does what `event` says: tells the debugger, queues the end-of-backward check, raises. A raise
// throws pybind11::error_already_set with msprobe_cpp.OverflowError set, after the step's files
// are written, with `cause` (or what the user's on_overflow raised) as its __cause__. GIL
// required.
void handle_overflow_event(Session& session, const OverflowEvent& event,
                           pybind11::object cause = pybind11::object());

struct PythonSide;
// The one stop raiser: replays an op origin, writes and ends the step, makes the OverflowError
// and its Overflow in one call, tells the debugger (on_stop: on_overflow where `event` notifies,
// the peer ranks) and raises, with `cause` or what on_overflow raised as its __cause__. GIL
// required.
[[noreturn]] void raise_stop(Session& session, const PythonSide& side, const OverflowEvent& event,
                             pybind11::object cause);

// Judges the queued calls (resolve_deferred) and does what their verdicts say: notices
// first, then the first stop, raised here. GIL required.
void flush_deferred(Session& session);

// Batched sync: asks the autograd engine to judge the queued calls when the backward pass ends.
// GIL required.
void queue_backward_flush(Session& session);

// msprobe_cpp.Overflow's fields, the one list of them: the facts as keyword arguments (without a
// call: call, scene and level None, for a stop that names no call of this rank). GIL required.
pybind11::dict overflow_fields(const OverflowFacts& facts);

// The facts as a msprobe_cpp.Overflow object. GIL required.
pybind11::object overflow_object(const PythonSide& side, const OverflowFacts& facts);

// stop() and step(), after the calls still waiting for their device statistics are judged: a
// stop they hold is raised here, with the step's files written.
void stop_collecting(Session& session);
void end_step(Session& session);

// Does what an event of session/overflow_control.h says (nothing for none). GIL required.
void handle_event(Session& session, const std::optional<OverflowEvent>& event);
// Before an optimizer step: whether its calls are left to the look after it
// (overflow_control.h), the queued calls judged first (a stop they hold is raised here). GIL
// required.
bool begin_optimizer_step(Session& session, bool runs_closure);

}  // namespace msprobe
