#include "live/hooks/module_observer.h"

#include <utility>

#include "live/capture/is_tensor.h"
#include "live/crossing/python_crossing.h"
#include "live/crossing/python_frames.h"
#include "live/hooks/module_backward.h"

namespace py = pybind11;

namespace msprobe {
namespace {

void add_tensors(py::handle values, ObservedTensors& out) {
  for (const py::handle v : values) {
    if (is_tensor(v)) out.push_back(tensor_of(v));
  }
}

// The forward's output as msprobe's monitor splits it: one item for a tensor, each element of a
// tuple or list (a non-tensor element is a slot without a tensor), none for anything else.
ObservedTensors output_slots(py::handle output) {
  ObservedTensors out;
  if (is_tensor(output)) {
    out.push_back(tensor_of(output));
  } else if (py::isinstance<py::tuple>(output) || py::isinstance<py::list>(output)) {
    for (const py::handle v : output) out.push_back(is_tensor(v) ? tensor_of(v) : at::Tensor());
  }
  return out;
}

ObservedOutputKind output_kind(py::handle output) {
  ObservedOutputKind k;
  const bool tuple = py::isinstance<py::tuple>(output), list = py::isinstance<py::list>(output);
  if (is_tensor(output)) {
    k.kind = "tensor";
  } else if (tuple || list) {
    k.kind = tuple ? "tuple" : "list";
    for (const py::handle v : output) {
      k.element_types.push_back(is_tensor(v) ? std::string()
                                             : py::str(py::type::handle_of(v)).cast<std::string>());
    }
  } else {
    k.kind = py::str(py::type::handle_of(output)).cast<std::string>();
  }
  return k;
}

class ObserverBackward final : public ModuleBackwardReceiver {
 public:
  ObserverBackward(std::shared_ptr<ModuleObserver> observer, std::string name)
      : observer_(std::move(observer)), name_(std::move(name)) {}

  std::function<void()> pass_ends(torch::autograd::variable_list into,
                                  torch::autograd::variable_list out_of) override {
    return [observer = observer_, name = name_, into = std::move(into),
            out_of = std::move(out_of)]() mutable {
      observer->backward(name, std::move(out_of), std::move(into));
    };
  }

 private:
  std::shared_ptr<ModuleObserver> observer_;
  std::string name_;
};

// The forwards under way, innermost last: a module's pre-hook pushes its start, its forward hook
// takes it back. Only touched with the GIL held.
struct OpenForwards {
  std::vector<std::pair<py::handle, std::shared_ptr<ModuleBackwardStart>>> open;

  std::shared_ptr<ModuleBackwardStart> take(py::handle module) {
    for (auto it = open.rbegin(); it != open.rend(); ++it) {
      if (!it->first.is(module)) continue;
      auto start = std::move(it->second);
      open.erase(std::next(it).base(), open.end());  // with any left open inside it (raised)
      return start;
    }
    return nullptr;
  }
};

bool in_training(py::handle module) {
  const py::object training =
      PythonCrossing::owned(PyObject_GetAttrString(module.ptr(), "training"));
  if (!training) {
    PythonCrossing::drop_error();
    return true;
  }
  return PyObject_IsTrue(training.ptr()) == 1;
}

// "<file>:<line>" of the innermost frame outside torch and this package: the user's line that
// called the module. GIL required.
std::string caller_line() {
  PythonCrossing::assert_gil();
  for (py::object frame = py::reinterpret_borrow<py::object>(PythonFrames::current()); frame;
       frame = PythonFrames::caller(frame)) {
    const py::object code = PythonFrames::code(frame);
    if (!code) break;
    const std::string file = py::str(PythonFrames::file_of(code)).cast<std::string>();
    if (file.find("/torch/") != std::string::npos ||
        file.find("/msprobe_cpp/") != std::string::npos || file.rfind("<frozen", 0) == 0) {
      continue;
    }
    return file + ":" + std::to_string(PythonFrames::line_at(code, PythonFrames::place(frame)));
  }
  return "";
}

}  // namespace

py::tuple make_observer_hooks(std::shared_ptr<ModuleObserver> observer, const std::string& name,
                              bool forward, bool backward) {
  auto forwards = std::make_shared<OpenForwards>();
  auto pre = [observer, forwards, backward](py::handle module, py::handle args,
                                            py::handle /*kwargs*/) {
    if (!backward || !observer->observing()) return;
    auto start = module_backward_start(args);
    if (start) forwards->open.emplace_back(module, std::move(start));
  };
  auto sourced = std::make_shared<bool>(false);  // GIL-guarded, as the hooks
  const bool kinds = observer->wants_output_kinds();
  auto post = [observer, forwards, sourced, name, forward, backward, kinds](
                  py::handle module, py::handle args, py::handle kwargs, py::handle output) {
    std::shared_ptr<ModuleBackwardStart> start = backward ? forwards->take(module) : nullptr;
    if (!observer->observing() || !in_training(module)) return;
    if (!std::exchange(*sourced, true)) observer->called_from(name, caller_line());
    if (forward) {
      if (kinds) observer->forward_kind(name, output_kind(output));
      ObservedTensors inputs;
      add_tensors(args, inputs);
      if (PyDict_Check(kwargs.ptr())) {
        for (const auto& item : py::reinterpret_borrow<py::dict>(kwargs)) {
          if (is_tensor(item.second)) inputs.push_back(tensor_of(item.second));
        }
      }
      observer->forward(name, std::move(inputs), output_slots(output));
    }
    if (start) {
      attach_backward_receiver(*start, output,
                               std::make_shared<ObserverBackward>(observer, name));
    }
  };
  return py::make_tuple(
      py::cpp_function(pre, py::arg("module"), py::arg("args"), py::arg("kwargs") = py::none()),
      py::cpp_function(post, py::arg("module"), py::arg("args"), py::arg("kwargs"),
                       py::arg("output")));
}

}  // namespace msprobe
