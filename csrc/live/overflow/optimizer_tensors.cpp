#include "live/overflow/optimizer_tensors.h"

#include <optional>

#include "live/capture/held_data.h"
#include "live/capture/is_tensor.h"
#include "live/crossing/python_crossing.h"
#include "live/hooks/hook_scope.h"
#include "live/overflow/model_tensors.h"
#include "live/session/session.h"

namespace py = pybind11;

namespace msprobe {

namespace {

// `t` as it is read here: a tensor subclass by the plain tensor it holds (a DTensor's shard);
// undefined where there is none, or where it is not floating point or not strided.
at::Tensor step_readable(const at::Tensor& t) {
  if (!t.defined()) return at::Tensor();
  at::Tensor plain = t.unsafeGetTensorImpl()->is_python_dispatch() ? held_tensor(t) : t;
  if (!plain.defined() || plain.layout() != at::kStrided || !plain.is_floating_point())
    return at::Tensor();
  return plain;
}

// The parameter's gradient (its .grad: what autograd wrote into it), undefined if none.
at::Tensor parameter_gradient(py::handle parameter) { return tensor_of(parameter).grad(); }

// Those of `all` that hold NaN/inf, in their order. Unhooked: on a device the look is made with
// torch's own calls, which are not the program's.
NamedTensors nonfinite_of(const NamedTensors& all) {
  if (all.empty()) return {};
  std::vector<std::string> bad;
  {
    ReentryGuard unhooked;
    bad = non_finite_gradients(all);
  }
  NamedTensors out;
  size_t j = 0;  // `bad` is in the order of `all`
  for (const auto& named : all) {
    if (j < bad.size() && named.first == bad[j]) {
      out.push_back(named);
      ++j;
    }
  }
  return out;
}

// The optimizer state of `parameter` as a dict, or null: state.get(parameter), read without
// adding to it (a torch optimizer's state is a defaultdict, whose state[p] adds an entry). A
// dict's is read in C++; another mapping's through its own get() and items().
py::object state_of(py::handle state, py::handle parameter) {
  try {
    py::object entry;
    if (PyDict_Check(state.ptr())) {
      const py::handle found = PyDict_GetItem(state.ptr(), parameter.ptr());
      if (!found) return py::object();
      entry = PythonCrossing::shared(found);
    } else {
      entry = state.attr("get")(parameter);
    }
    if (entry.is_none()) return py::object();
    return PyDict_Check(entry.ptr()) ? entry : py::object(py::dict(entry));
  } catch (py::error_already_set&) {
    return py::object();  // no mapping of parameters to their state: nothing to look at
  }
}

}  // namespace

OptimizerTensors::OptimizerTensors(Session& session, py::handle optimizer, bool started)
    : optimizer_(PythonCrossing::shared(optimizer)) {
  PythonCrossing::assert_gil();
  const py::object groups =
      PythonCrossing::owned(PyObject_GetAttrString(optimizer.ptr(), "param_groups"));
  if (!groups || !PyList_Check(groups.ptr())) {
    PythonCrossing::drop_error();  // no torch optimizer: nothing to look at
    return;
  }
  const py::list group_list = py::reinterpret_borrow<py::list>(groups);
  for (size_t g = 0; g < group_list.size(); ++g) {
    const py::handle group = group_list[g];
    const py::handle params =
        PyDict_Check(group.ptr()) ? PyDict_GetItemString(group.ptr(), "params") : py::handle();
    if (!params || !is_py_sequence(params)) continue;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(params.ptr()); ++i) {
      const py::handle p = PySequence_Fast_GET_ITEM(params.ptr(), i);
      if (!is_tensor(p)) continue;
      std::string place;
      if (!started)
        place = "param_groups[" + std::to_string(g) + "].params[" + std::to_string(i) + "]";
      parameters_.push_back({std::move(place), PythonCrossing::shared(p)});
    }
  }
  if (started) keep_started(session);
}

void OptimizerTensors::keep_started(Session& session) {
  // As start() took them: a DTensor by its shard.
  std::vector<at::Tensor> tensors;
  tensors.reserve(parameters_.size());
  for (const Parameter& p : parameters_) {
    const at::Tensor held = held_tensor(tensor_of(p.object));
    tensors.push_back(held.defined() ? held : tensor_of(p.object));
  }
  const std::vector<std::optional<std::string>> names = session.guard().parameter_names(tensors);
  std::vector<Parameter> named;
  for (size_t k = 0; k < parameters_.size(); ++k) {
    if (names[k]) named.push_back({*names[k], std::move(parameters_[k].object)});
  }
  parameters_ = std::move(named);
}

std::vector<OptimizerTensors::State> OptimizerTensors::state() const {
  std::vector<State> out;
  const py::object state = PythonCrossing::owned(PyObject_GetAttrString(optimizer_.ptr(), "state"));
  if (!state) {
    PythonCrossing::drop_error();
    return out;
  }
  for (const Parameter& p : parameters_) {
    const py::object entry = state_of(state, p.object);
    if (!entry) continue;
    for (const auto& [key, value] : py::reinterpret_borrow<py::dict>(entry)) {
      if (!is_tensor(value)) continue;
      const at::Tensor local = step_readable(tensor_of(value));
      if (!local.defined()) continue;
      const std::string k = py::str(key);
      out.push_back({k + " of " + p.name, k, &p, local});
    }
  }
  return out;
}

NamedTensors OptimizerTensors::nonfinite_gradients() const {
  PythonCrossing::assert_gil();
  NamedTensors gradients;
  gradients.reserve(parameters_.size());
  for (const Parameter& p : parameters_) {
    const at::Tensor g = step_readable(parameter_gradient(p.object));
    if (g.defined()) gradients.emplace_back(p.name, g);
  }
  return nonfinite_of(gradients);
}

std::vector<std::pair<std::string, std::string>> OptimizerTensors::nonfinite_state() const {
  PythonCrossing::assert_gil();
  const std::vector<State> all = state();
  NamedTensors named;
  named.reserve(all.size());
  for (const State& s : all) named.emplace_back(s.name, s.local);
  const NamedTensors bad = nonfinite_of(named);
  std::vector<std::pair<std::string, std::string>> out;
  size_t j = 0;  // `bad` is in the order of `all`
  for (const State& s : all) {
    if (j < bad.size() && s.name == bad[j].first) {
      out.emplace_back(s.key, s.parameter->name);
      ++j;
    }
  }
  return out;
}

NamedTensors OptimizerTensors::nonfinite_written() const {
  PythonCrossing::assert_gil();
  NamedTensors written;
  for (const Parameter& p : parameters_) {
    if (!parameter_gradient(p.object).defined()) continue;  // a parameter the step did not update
    const at::Tensor local = step_readable(tensor_of(p.object));
    if (local.defined()) written.emplace_back(p.name, local);
  }
  for (const State& s : state()) written.emplace_back(s.name, s.local);  // as the step left it
  return nonfinite_of(written);
}

}  // namespace msprobe
