#include "torch/api_hook.h"

#include <torch/csrc/autograd/python_variable.h>

#include <vector>

#include "torch/grad_hook.h"
#include "torch/hook_scope.h"
#include "torch/py_values.h"
#include "torch/session.h"

namespace py = pybind11;

namespace msprobe {

namespace {

void collect_grad_fns(PyObject* obj, std::vector<const torch::autograd::Node*>& out, int depth) {
  if (THPVariable_Check(obj)) {
    out.push_back(THPVariable_Unpack(obj).grad_fn().get());
  } else if ((PyTuple_Check(obj) || PyList_Check(obj)) && depth < 4) {
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(obj); ++i) {
      collect_grad_fns(PySequence_Fast_GET_ITEM(obj, i), out, depth + 1);
    }
  }
}

// The autograd node that produced the call's first differentiable output, unless that node
// existed before the call (an API that returned one of its inputs, like `x.to(x.dtype)`).
std::shared_ptr<torch::autograd::Node> new_grad_fn(
    PyObject* result, const std::vector<const torch::autograd::Node*>& before) {
  PyObject* first = result;
  if (PyTuple_Check(result) || PyList_Check(result)) {
    first = nullptr;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(result) && !first; ++i) {
      PyObject* item = PySequence_Fast_GET_ITEM(result, i);
      if (THPVariable_Check(item) && THPVariable_Unpack(item).grad_fn()) first = item;
    }
  }
  if (!first || !THPVariable_Check(first)) return nullptr;
  std::shared_ptr<torch::autograd::Node> fn = THPVariable_Unpack(first).grad_fn();
  if (!fn) return nullptr;
  for (const auto* b : before) {
    if (b == fn.get()) return nullptr;
  }
  return fn;
}

}  // namespace

py::object ApiHook::call(py::args args, py::kwargs kwargs) {
  std::shared_ptr<Session> session = current_session();
  if (!session || !session->collecting() || ReentryGuard::inside()) {
    return original_(*args, **kwargs);
  }
  ReentryGuard guard;

  StoredCall call;
  std::vector<const torch::autograd::Node*> grad_fns_before;
  call.record.inputs.reserve(args.size());
  for (py::handle a : args) {
    call.record.inputs.push_back(describe_value(a.ptr()));
    collect_grad_fns(a.ptr(), grad_fns_before, 0);
  }
  for (auto kv : kwargs) {
    call.record.kwargs.emplace_back(py::str(kv.first), describe_value(kv.second.ptr()));
  }
  call.stack = session->capture_stack();
  call.parent = enclosing_module();

  py::object result = original_(*args, **kwargs);

  call.record.outputs = describe_outputs(result.ptr());
  const std::string prefix = api_ + "." + std::to_string(session->next_index(api_)) + ".";
  call.record.name = prefix + "forward";
  if (auto fn = new_grad_fn(result.ptr(), grad_fns_before)) {
    add_backward_recorder(*fn, session, prefix + "backward", call.stack);
  }
  session->add(std::move(call));
  return result;
}

}  // namespace msprobe
