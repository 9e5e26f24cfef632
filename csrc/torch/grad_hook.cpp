#include "torch/grad_hook.h"

#include <pybind11/pybind11.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/function_hook.h>

#include "torch/call_submit.h"
#include "torch/live_tensors.h"
#include "torch/overflow_raise.h"
#include "torch/tensor_stats.h"

namespace py = pybind11;

namespace msprobe {

namespace {

using torch::autograd::variable_list;

std::vector<Entry> describe_grads(const variable_list& grads, const DescribeOptions& options,
                                  const std::string& stem) {
  std::vector<Entry> out;
  out.reserve(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    out.push_back(grads[i].defined()
                      ? describe_tensor_for(grads[i], options, options.item_stem(stem, i))
                      : Entry::null_entry());
  }
  return out;
}

std::vector<LiveArg> live_grads(const variable_list& grads) {
  std::vector<LiveArg> out;
  out.reserve(grads.size());
  for (const at::Tensor& g : grads) out.push_back(LiveArg{g, {}});
  return out;
}

// Batched sync: queued like any call; under overflow_check the pass's end is asked to judge the
// queue, so a stop comes before an optimizer uses the gradients.
void defer_backward(Session& s, StoredCall&& call, const variable_list& inputs,
                    const variable_list& outputs) {
  LiveTensors live =
      s.watching() ? LiveTensors{live_grads(inputs), {}, live_grads(outputs)} : LiveTensors{};
  const bool flush = s.defer(std::move(call), std::move(live));
  if (!flush && !s.claim_backward_flush()) return;
  py::gil_scoped_acquire gil;
  try {
    if (flush) {
      flush_deferred(s);
    } else {
      queue_backward_flush(s);
    }
  } catch (py::error_already_set& e) {
    e.restore();
    python_error err;
    err.persist();
    throw err;
  }
}

class BackwardRecorder : public torch::autograd::FunctionPostHook {
 public:
  BackwardRecorder(std::weak_ptr<Session> session, std::string name, StackPtr stack, Selected parts,
                   std::optional<std::string> module)
      : session_(std::move(session)),
        name_(std::move(name)),
        stack_(std::move(stack)),
        parts_(parts),
        module_(std::move(module)) {}

  // The node's inputs are the gradients flowing into the call, its outputs those flowing out.
  variable_list operator()(const variable_list& outputs, const variable_list& inputs) override {
    std::shared_ptr<Session> s = session_.lock();
    if (!s || !s->collecting()) return outputs;
    record_backward(*s, backward_call(name_, parts_, stack_, module_), inputs, outputs);
    return outputs;
  }

 private:
  std::weak_ptr<Session> session_;
  std::string name_;
  StackPtr stack_;
  Selected parts_;
  std::optional<std::string> module_;
};

}  // namespace

void record_backward(Session& s, StoredCall&& call, const variable_list& grads_in,
                     const variable_list& grads_out) {
  const DescribeOptions& options = s.describe_options();
  const std::string& name = call.record.name;
  if (call.record.has_inputs)
    call.record.inputs = describe_grads(grads_in, options, options.stem(name, "input"));
  if (call.record.has_outputs)
    call.record.outputs = describe_grads(grads_out, options, options.stem(name, "output"));
  if (s.must_defer(call)) {
    defer_backward(s, std::move(call), grads_in, grads_out);
    return;
  }
  if (!s.watching()) {
    s.add(std::move(call));
    return;
  }
  const LiveTensors live{live_grads(grads_in), {}, live_grads(grads_out)};
  if (auto event = s.add(std::move(call), &live)) {
    py::gil_scoped_acquire gil;
    try {
      handle_overflow_event(s, *event);
    } catch (py::error_already_set& e) {
      // Handed to the engine as torch's own Python error, so loss.backward() raises it as is.
      e.restore();
      python_error err;
      err.persist();
      throw err;
    }
  }
}

void add_backward_recorder(const NodePtr& node, const std::shared_ptr<Session>& session,
                           std::string name, StackPtr stack, Selected parts,
                           std::optional<std::string> module) {
  node->add_post_hook(std::make_unique<BackwardRecorder>(session, std::move(name), std::move(stack),
                                                         parts, std::move(module)));
}

}  // namespace msprobe
