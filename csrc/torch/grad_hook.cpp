#include "torch/grad_hook.h"

#include <torch/csrc/autograd/function_hook.h>

#include "torch/describe_options.h"

namespace msprobe {

namespace {

std::vector<Entry> describe_grads(const torch::autograd::variable_list& grads,
                                  const DescribeOptions& options, const std::string& stem) {
  std::vector<Entry> out;
  out.reserve(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    out.push_back(describe_tensor_for(grads[i], options, stem + "." + std::to_string(i)));
  }
  return out;
}

class BackwardRecorder : public torch::autograd::FunctionPostHook {
 public:
  BackwardRecorder(std::weak_ptr<Session> session, std::string name, StackPtr stack, Selected parts)
      : session_(std::move(session)),
        name_(std::move(name)),
        stack_(std::move(stack)),
        parts_(parts) {}

  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& grad_inputs,
      const torch::autograd::variable_list& grad_outputs) override {
    std::shared_ptr<Session> s = session_.lock();
    if (!s || !s->collecting()) return grad_inputs;
    const DescribeOptions& options = s->describe_options();
    StoredCall call;
    call.record.name = name_;
    call.record.uses_input_key = true;
    call.record.has_inputs = parts_.inputs;
    call.record.has_outputs = parts_.outputs;
    if (parts_.inputs) call.record.inputs = describe_grads(grad_outputs, options, name_ + ".input");
    if (parts_.outputs) {
      call.record.outputs = describe_grads(grad_inputs, options, name_ + ".output");
    }
    call.stack = stack_;
    s->add(std::move(call));
    return grad_inputs;
  }

 private:
  std::weak_ptr<Session> session_;
  std::string name_;
  StackPtr stack_;
  Selected parts_;
};

}  // namespace

void add_backward_recorder(torch::autograd::Node& node, const std::shared_ptr<Session>& session,
                           std::string name, StackPtr stack, Selected parts) {
  node.add_post_hook(
      std::make_unique<BackwardRecorder>(session, std::move(name), std::move(stack), parts));
}

}  // namespace msprobe
