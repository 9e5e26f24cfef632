#include "torch/module_hooks.h"

#include "torch/hook_scope.h"
#include "torch/py_values.h"
#include "torch/session.h"

namespace py = pybind11;

namespace msprobe {

namespace {

std::vector<Entry> describe_items(PyObject* seq) {
  if (PyTuple_Check(seq) || PyList_Check(seq)) return describe_value(seq).items;
  return {describe_value(seq)};
}

}  // namespace

py::tuple make_module_hooks(const std::string& qualname, const std::string& class_name) {
  const std::string base = "Module." + qualname + "." + class_name;
  const std::string forward_key = base + ".forward";
  const std::string backward_key = base + ".backward";

  // PyTorch >= 2.0 passes keyword arguments too (registered with with_kwargs=True).
  auto pre = [forward_key](py::handle module, py::handle inputs, py::handle kwargs) {
    std::shared_ptr<Session> s = current_session();
    if (!s || !s->collecting()) return;
    OpenModuleCall open;
    open.module = module.ptr();
    open.name = forward_key + "." + std::to_string(s->next_index(forward_key));
    open.inputs = describe_items(inputs.ptr());
    if (PyDict_Check(kwargs.ptr())) {
      for (auto kv : py::reinterpret_borrow<py::dict>(kwargs)) {
        open.kwargs.emplace_back(py::str(kv.first), describe_value(kv.second.ptr()));
      }
    }
    open.stack = s->capture_stack();
    open.parent = enclosing_module();
    open_module_calls().push_back(std::move(open));
  };

  auto post = [](py::handle module, py::handle /*inputs*/, py::handle output) {
    auto& calls = open_module_calls();
    // A forward that began before collection started has no open call: nothing to record.
    if (calls.empty() || calls.back().module != module.ptr()) return;
    OpenModuleCall open = std::move(calls.back());
    calls.pop_back();
    std::shared_ptr<Session> s = current_session();
    if (!s || !s->collecting()) return;
    StoredCall call;
    call.record.name = std::move(open.name);
    call.record.inputs = std::move(open.inputs);
    call.record.kwargs = std::move(open.kwargs);
    call.record.outputs = describe_outputs(output.ptr());
    call.stack = std::move(open.stack);
    call.parent = std::move(open.parent);
    s->add(std::move(call));
  };

  auto backward = [backward_key](py::handle /*module*/, py::handle grad_input,
                                 py::handle grad_output) {
    std::shared_ptr<Session> s = current_session();
    if (!s || !s->collecting()) return;
    StoredCall call;
    call.record.name = backward_key + "." + std::to_string(s->next_index(backward_key));
    call.record.uses_input_key = true;
    call.record.inputs = describe_items(grad_output.ptr());
    call.record.outputs = describe_items(grad_input.ptr());
    call.stack = s->capture_stack();
    s->add(std::move(call));
  };

  return py::make_tuple(
      py::cpp_function(pre, py::arg("module"), py::arg("args"), py::arg("kwargs") = py::none()),
      py::cpp_function(post), py::cpp_function(backward));
}

}  // namespace msprobe
