#include "torch/grad_hook.h"

#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/python_cpp_function.h>

#include "torch/overflow_raise.h"
#include "torch/py_values.h"

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
    const DescribeOptions& options = s->describe_options();
    StoredCall call;
    call.record.name = name;
    call.record.uses_input_key = true;
    call.record.has_inputs = parts.inputs;
    call.record.has_outputs = parts.outputs;
    if (parts.inputs)
      call.record.inputs = describe_items(grad_outputs.ptr(), options, name + ".input");
    if (parts.outputs) {
      call.record.outputs = describe_items(grad_inputs.ptr(), options, name + ".output");
    }
    call.stack = stack;
    call.module_hint = module;
    if (s->watching()) {
      const LiveTensors live{tensors_of(grad_outputs.ptr()), {}, tensors_of(grad_inputs.ptr())};
      if (auto stop = s->add(std::move(call), &live)) raise_overflow(*s, *stop);
    } else {
      s->add(std::move(call));
    }
  };
  py::object fn = py::reinterpret_steal<py::object>(torch::autograd::functionToPyObject(node));
  fn.attr("register_hook")(py::cpp_function(hook));
}

}  // namespace msprobe
