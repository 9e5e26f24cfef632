// Where the overflow guard crosses into Python: debugger.overflow and on_overflow, the callback
// queued on the autograd engine at the end of a backward pass, and the OverflowError itself.
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

// What Python asks of the session and its guard, each with its consequence done: the
// judgements made outside any hooked call, the step's end with the calls batched sync still
// holds, and a peer's stop. The bindings (bind/bind_session.cpp) only bind these.
// stop() and step(), after the calls still waiting for their device statistics are judged: a
// stop they hold is raised here, with the step's files written.
void stop_collecting(Session& session);
void end_step(Session& session);

// At step(): the loss scale now; a scale that fell too low stops.
void judge_loss_scale(Session& session, double after, bool skipped);
// Before an optimizer step: its numeric settings; a non-finite one stops before the step.
void judge_optimizer_settings(Session& session, const std::string& optimizer,
                              std::vector<std::pair<std::string, double>> settings);
// Before an optimizer's step: its parameters whose gradients hold NaN/inf (`reduced`: averaged
// across ranks), or its state of `parameter` that does (and `more` others). A stop names the
// program's line that called the step.
void judge_optimizer_gradients(Session& session, const std::string& optimizer,
                               std::vector<std::string> bad, bool reduced);
void judge_optimizer_state(Session& session, const std::string& optimizer, const std::string& state,
                           const std::string& parameter, size_t more);
// Task overflow_check at L1 and mix, an optimizer's step: its calls (Adam's ten a parameter) are
// not judged one by one; the parameters and state it wrote are looked at once after it
// (judge_optimizer_update). Not where it runs a closure (LBFGS: the model's forward and backward
// run inside, and are judged as usual), nor outside a collected step, nor in a step flagged
// already (action continue: a written step holds its optimizer's calls). Returns whether the calls
// are left; end_optimizer_step() returns whether they were, so the look after the step is due.
bool begin_optimizer_step(Session& session, bool runs_closure);
bool end_optimizer_step(Session& session);
// After that step: `bad` names what holds NaN/inf now ("<parameter>", "<state key> of
// <parameter>"), finite before it: the step's own arithmetic made them (origin op).
void judge_optimizer_update(Session& session, const std::string& optimizer,
                            std::vector<std::string> bad);
// The tensors a torch.compile'd model returned, in forward collection.
void mark_compiled_outputs(Session& session, pybind11::handle output);
// The watcher thread's call for another rank's stop: writes this rank's step and ends it; the
// folder, or "". No user code and no raise on that thread: the batch still queued is judged into
// the step's records and report, and this rank raises the peer's stop at its next hooked call.
std::string stop_for_peer(Session& session, const PeerOverflow& peer);

}  // namespace msprobe
