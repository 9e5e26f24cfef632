// What Python asks of the session and its guard outside any hooked call, decided here and handed
// back as events: the judgements at a loss scaler's and an optimizer's step, the calls batched
// sync still holds, a peer's stop. Nothing here crosses into Python or raises; the crossing
// (overflow/python_side.h) does what the events say. Every function runs with the GIL held (the
// bindings' calls), which the queued calls' held arguments need when they are let go.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/overflow_decisions.h"
#include "live/overflow/optimizer_tensors.h"
#include "live/session/session.h"

namespace msprobe {

// Batched sync: reads every queued call's device statistics back at once, then stores and judges
// the calls in the order they were made, as Session::add would have one by one. Returns what the
// hooks must do; a raise carries how many calls ran after its call, and the raising call's
// arguments are kept for its replay (raising_call_arguments()).
std::vector<OverflowEvent> resolve_deferred(Session& session);

// At step(): the loss scale now; a scale that fell too low stops.
std::optional<OverflowEvent> judge_loss_scale(Session& session, double after, bool skipped);
// Before an optimizer step: its numeric settings; a non-finite one stops before the step.
std::optional<OverflowEvent> judge_optimizer_settings(
    Session& session, const std::string& optimizer,
    std::vector<std::pair<std::string, double>> settings);
// Before an optimizer's step: its parameters whose gradients hold NaN/inf (`reduced`: averaged
// across ranks), or its state of `parameter` that does (and `more` others). A stop names the
// program's line that called the step.
// Each of `bad` is (name, tensor): the stop gives the first ones' dtype, shape and NaN/inf counts,
// as it does for a call's tensors (no record holds these). NamedTensors: optimizer_tensors.h's.
std::optional<OverflowEvent> judge_optimizer_gradients(Session& session,
                                                       const std::string& optimizer,
                                                       const NamedTensors& bad, bool reduced);
std::optional<OverflowEvent> judge_optimizer_state(Session& session, const std::string& optimizer,
                                                   const std::string& state,
                                                   const std::string& parameter, size_t more);
// After a step whose calls were left: `bad` is what holds NaN/inf now ("<parameter>",
// "<state key> of <parameter>"), finite before it: the step's own arithmetic made them.
std::optional<OverflowEvent> judge_optimizer_update(Session& session, const std::string& optimizer,
                                                    const NamedTensors& bad);

// Task overflow_check at L1 and mix, an optimizer's step: its calls (Adam's ten a parameter) are
// not judged one by one; the parameters and state it wrote are looked at once after it. Not
// where it runs a closure (LBFGS: the model's forward and backward run inside, and are judged as
// usual), nor outside a collected step. may_leave_optimizer_calls() says whether the step's
// calls may be left (the queued calls are judged first: a flagged step is written whole, its
// optimizer's calls recorded); leave_optimizer_calls() leaves them unless the step is flagged.
// end_optimizer_step() returns whether they were left, so the look after the step is due.
bool may_leave_optimizer_calls(Session& session, bool runs_closure);
bool leave_optimizer_calls(Session& session);
bool end_optimizer_step(Session& session);

// The tensors a torch.compile'd model returned, in forward collection.
void mark_compiled_outputs(Session& session, pybind11::handle output);

// The watcher thread's call for another rank's stop: writes this rank's step and ends it; the
// folder, or "". No user code and no raise on that thread: the batch still queued is judged into
// the step's records and report, and this rank raises the peer's stop at its next hooked call.
std::string stop_for_peer(Session& session, const PeerOverflow& peer);

}  // namespace msprobe
