#include "torch/grad_hook.h"

#include <torch/csrc/autograd/function_hook.h>

#include "torch/tensor_stats.h"

namespace msprobe {

namespace {

class BackwardRecorder : public torch::autograd::FunctionPostHook {
 public:
  BackwardRecorder(std::weak_ptr<Session> session, std::string name, StackPtr stack)
      : session_(std::move(session)), name_(std::move(name)), stack_(std::move(stack)) {}

  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& grad_inputs,
      const torch::autograd::variable_list& grad_outputs) override {
    std::shared_ptr<Session> s = session_.lock();
    if (!s || !s->collecting()) return grad_inputs;
    StoredCall call;
    call.record.name = name_;
    call.record.uses_input_key = true;
    call.record.inputs.reserve(grad_outputs.size());
    for (const at::Tensor& g : grad_outputs) call.record.inputs.push_back(describe_tensor(g));
    call.record.outputs.reserve(grad_inputs.size());
    for (const at::Tensor& g : grad_inputs) call.record.outputs.push_back(describe_tensor(g));
    call.stack = stack_;
    s->add(std::move(call));
    return grad_inputs;
  }

 private:
  std::weak_ptr<Session> session_;
  std::string name_;
  StackPtr stack_;
};

}  // namespace

void add_backward_recorder(torch::autograd::Node& node, const std::shared_ptr<Session>& session,
                           std::string name, StackPtr stack) {
  node.add_post_hook(
      std::make_unique<BackwardRecorder>(session, std::move(name), std::move(stack)));
}

}  // namespace msprobe
