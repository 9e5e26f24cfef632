#include "torch/call_submit.h"

#include <cstdio>

#include "torch/describe_options.h"
#include "torch/live_tensors.h"
#include "torch/py_values.h"

namespace msprobe {

void warn_statistics_failure(Session& session, const std::string& call) {
  const std::string why = take_statistics_failure();
  if (why.empty() || !session.first_statistics_failure()) return;
  std::fprintf(stderr,
               "msprobe_cpp: warning: statistics of a tensor of %s could not be computed, "
               "recorded as null (said once): %s\n",
               call.c_str(), why.c_str());
}

void flush_deferred(Session& session) {
  std::vector<OverflowEvent> events = session.resolve_deferred();
  const OverflowEvent* stop = nullptr;
  for (const OverflowEvent& e : events) {
    if (e.raise) {
      if (!stop) stop = &e;
      continue;
    }
    handle_overflow_event(session, e);
  }
  if (stop) handle_overflow_event(session, *stop);  // raises
}

StoredCall backward_call(const std::string& name, Selected parts, StackPtr stack,
                         std::optional<std::string> module_hint) {
  StoredCall call;
  call.record.name = name;
  call.record.uses_input_key = true;
  call.record.has_inputs = parts.inputs;
  call.record.has_outputs = parts.outputs;
  call.stack = std::move(stack);
  call.module_hint = std::move(module_hint);
  return call;
}

void submit_backward(Session& session, const std::string& name, pybind11::handle grads_in,
                     pybind11::handle grads_out, Selected parts, StackPtr stack,
                     std::optional<std::string> module_hint) {
  const DescribeOptions& options = session.describe_options();
  StoredCall call = backward_call(name, parts, std::move(stack), std::move(module_hint));
  if (parts.inputs)
    call.record.inputs = describe_items(grads_in.ptr(), options, options.stem(name, "input"));
  if (parts.outputs)
    call.record.outputs = describe_items(grads_out.ptr(), options, options.stem(name, "output"));
  submit(session, std::move(call), [&] {
    return LiveTensors{live_args_of(grads_in.ptr()), {}, live_args_of(grads_out.ptr())};
  });
}

}  // namespace msprobe
