#include "torch/grad_hook.h"

#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/python_cpp_function.h>

#include "torch/call_submit.h"

namespace py = pybind11;

namespace msprobe {

void add_backward_recorder(const std::shared_ptr<torch::autograd::Node>& node,
                           const std::shared_ptr<Session>& session, std::string name,
                           StackPtr stack, Selected parts, std::optional<std::string> module) {
  std::weak_ptr<Session> weak = session;
  auto hook = [weak, name = std::move(name), stack = std::move(stack), parts,
               module = std::move(module)](py::handle grad_inputs, py::handle grad_outputs) {
    std::shared_ptr<Session> s = weak.lock();
    if (!s || !s->collecting()) return;
    // The node's inputs are the gradients flowing into the call, its outputs those flowing out.
    submit_backward(*s, name, grad_outputs, grad_inputs, parts, stack, module);
  };
  py::object fn = py::reinterpret_steal<py::object>(torch::autograd::functionToPyObject(node));
  fn.attr("register_hook")(py::cpp_function(hook));
}

}  // namespace msprobe
