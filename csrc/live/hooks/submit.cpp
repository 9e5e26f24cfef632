#include "live/hooks/submit.h"

#include "live/capture/call_values.h"
#include "live/capture/live_tensors.h"
#include "live/capture/tensor_entry.h"
#include "live/crossing/python_crossing.h"
#include "live/log/tool_log.h"
#include "live/overflow/call_arguments.h"

namespace msprobe {

void warn_statistics_failure(Session& session, const std::string& call) {
  const std::string why = take_statistics_failure();
  if (why.empty() || !session.said().first(" statistics failure")) return;
  say_warning("statistics of a tensor of " + call +
              " could not be computed, recorded as null (said once): " + why);
}

void submit(Session& session, StoredCall&& call, LiveTensors&& live, Caller caller) {
  warn_statistics_failure(session, call.record.name);
  bool flush = false, queue_flush = false;
  std::optional<OverflowEvent> event;
  DeferredCalls& deferred = session.deferred();
  if (deferred.must_defer(call)) {
    // Batched sync: judged when its batch comes back (at once under sync "call"). A backward
    // pass asks for its queue to be judged at its end, before an optimizer uses the gradients.
    // An API call keeps its arguments until then: a stop replays it (python_side).
    std::shared_ptr<HeldArguments> held;
    const CallArguments* current = current_call_arguments();
    if (caller == Caller::Python && current && session.config().watching() &&
        session.config().overflow_check.replay && *current->name == call.record.name) {
      held = std::make_shared<HeldArguments>(*current, live);
    }
    flush = deferred.defer(DeferredCall{std::move(call), std::move(live), std::move(held)});
    queue_flush = !flush && caller == Caller::AutogradEngine && session.config().watching() &&
                  deferred.claim_backward_flush();
    if (!flush && !queue_flush) return;
  } else if (!session.config().watching()) {
    session.add(std::move(call));
    return;
  } else {
    event = session.add(std::move(call), &live);
    if (!event) return;
  }
  auto act = [&] {
    if (flush) {
      flush_deferred(session);
    } else if (queue_flush) {
      queue_backward_flush(session);
    } else {
      handle_overflow_event(session, *event);
    }
  };
  if (caller == Caller::Python) {
    act();
    return;
  }
  PythonCrossing::Gil gil;
  try {
    act();
  } catch (pybind11::error_already_set& e) {
    PythonCrossing::rethrow_to_autograd(e);
  }
}

StoredCall backward_call(const std::string& name, Selected parts, StackPtr stack,
                         std::optional<std::string> module_hint) {
  StoredCall call;
  call.record.name = name;
  call.record.uses_input_key = true;
  call.record.has_inputs = parts.inputs;
  call.record.has_outputs = parts.outputs;
  call.construct_only = parts.construct_only;
  call.stack = std::move(stack);
  call.module_hint = std::move(module_hint);
  return call;
}

void submit_backward(Session& session, const std::string& name, pybind11::handle grads_in,
                     pybind11::handle grads_out, Selected parts, StackPtr stack,
                     std::optional<std::string> module_hint) {
  const EntryOptions& options = session.hooks().capture.options(name);
  StoredCall call = backward_call(name, parts, std::move(stack), std::move(module_hint));
  LiveTensors live;
  const bool watching = session.config().watching();
  if (parts.inputs) {
    call.record.inputs = item_entries(grads_in, options, options.stem(name, "input"),
                                      watching ? &live.inputs : nullptr);
  }
  if (parts.outputs) {
    call.record.outputs = item_entries(grads_out, options, options.stem(name, "output"),
                                       watching ? &live.outputs : nullptr);
  }
  submit(session, std::move(call), std::move(live));
}

}  // namespace msprobe
