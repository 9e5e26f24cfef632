#include "live/hooks/backward_recorder.h"

#include <torch/csrc/autograd/function_hook.h>

#include "live/capture/held_data.h"
#include "live/capture/live_tensors.h"
#include "live/capture/tensor_entry.h"
#include "live/hooks/submit.h"

namespace msprobe {

namespace {

using torch::autograd::variable_list;

// The gradients' entries and, with `live`, the tensors behind them.
std::vector<Entry> grad_entries(const variable_list& grads, const EntryOptions& options,
                                const std::string& stem, std::vector<LiveArg>* live) {
  std::vector<Entry> out;
  out.reserve(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    // A DTensor's gradient (tensor parallel) by this rank's shard, as its forward was.
    const at::Tensor held = held_tensor(grads[i]);
    const at::Tensor& grad = held.defined() ? held : grads[i];
    out.push_back(grad.defined() ? tensor_entry(grad, options, options.item_stem(stem, i))
                                 : Entry::null_entry());
    if (live) live->push_back(LiveArg{grad, {}});
  }
  return out;
}

class BackwardRecorder : public torch::autograd::FunctionPostHook {
 public:
  BackwardRecorder(std::weak_ptr<Session> session, std::string name, StackPtr stack, Selected parts,
                   std::optional<std::string> module, uint64_t epoch)
      : session_(std::move(session)),
        name_(std::move(name)),
        stack_(std::move(stack)),
        parts_(parts),
        module_(std::move(module)),
        epoch_(epoch) {}

  // The node's inputs are the gradients flowing into the call, its outputs those flowing out.
  variable_list operator()(const variable_list& outputs, const variable_list& inputs) override {
    std::shared_ptr<Session> s = session_.lock();
    if (!s || !s->hooks().gate.backward()) return outputs;
    // Numbered with its forward: it belongs to the forward's step.
    StoredCall call = backward_call(name_, parts_, stack_, module_);
    call.epoch = epoch_;
    if (kBackwardScopes) call.parent = s->hooks().backward_scope.innermost();
    record_backward(*s, std::move(call), inputs, outputs);
    return outputs;
  }

 private:
  std::weak_ptr<Session> session_;
  std::string name_;
  StackPtr stack_;
  Selected parts_;
  std::optional<std::string> module_;
  uint64_t epoch_;
};

// A task's look at one output's gradient (add_gradient_callback).
class GradientCallback : public torch::autograd::FunctionPostHook {
 public:
  GradientCallback(uint32_t output_nr, std::function<void(const at::Tensor&)> on_gradient)
      : output_nr_(output_nr), on_gradient_(std::move(on_gradient)) {}

  // The node's inputs are the gradients of the outputs it was made for, by output number.
  variable_list operator()(const variable_list& outputs, const variable_list& inputs) override {
    if (output_nr_ < inputs.size() && inputs[output_nr_].defined())
      on_gradient_(inputs[output_nr_]);
    return outputs;
  }

 private:
  uint32_t output_nr_;
  std::function<void(const at::Tensor&)> on_gradient_;
};

}  // namespace

void record_backward(Session& s, StoredCall&& call, const variable_list& grads_in,
                     const variable_list& grads_out) {
  const EntryOptions& options = s.hooks().capture.options(call.record.name);
  const std::string& name = call.record.name;
  LiveTensors live;
  const bool watching = s.config().watching();
  if (call.record.has_inputs) {
    call.record.inputs = grad_entries(grads_in, options, options.stem(name, "input"),
                                      watching ? &live.inputs : nullptr);
  }
  if (call.record.has_outputs) {
    call.record.outputs = grad_entries(grads_out, options, options.stem(name, "output"),
                                       watching ? &live.outputs : nullptr);
  }
  submit(s, std::move(call), std::move(live), Caller::AutogradEngine);
}

void add_backward_recorder(const NodePtr& node, const std::shared_ptr<Session>& session,
                           std::string name, StackPtr stack, Selected parts,
                           std::optional<std::string> module, uint64_t epoch) {
  node->add_post_hook(std::make_unique<BackwardRecorder>(session, std::move(name), std::move(stack),
                                                         parts, std::move(module), epoch));
}

bool add_gradient_callback(const at::Tensor& output,
                           std::function<void(const at::Tensor&)> on_gradient) {
  NodePtr node = output.grad_fn();
  if (!node) return false;
  node->add_post_hook(
      std::make_unique<GradientCallback>(output.output_nr(), std::move(on_gradient)));
  return true;
}

}  // namespace msprobe
