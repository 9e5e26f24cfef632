#include "live/free_benchmark/backward_check.h"

#include <torch/csrc/autograd/autograd.h>

#include "live/crossing/python_crossing.h"
#include "live/free_benchmark/perturbation.h"
#include "live/capture/is_tensor.h"

namespace py = pybind11;

namespace msprobe {
namespace {

bool low_precision(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}

// The output the hook watched, in a run's result.
at::Tensor hooked_output(const py::object& result, const std::optional<size_t>& at) {
  const py::handle out = at ? py::handle(result[py::int_(*at)]) : py::handle(result);
  if (!is_tensor(out)) throw std::runtime_error("the second run's output is not a tensor");
  return tensor_of(out);
}

std::vector<at::Tensor> leaves_of(const std::vector<at::Tensor>& values) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& v : values) out.push_back(v.detach().requires_grad_(true));
  return out;
}

// One run: the call on `args` (leaves put at their places), its gradients for `grad_output`.
std::vector<at::Tensor> run_gradients(const BackwardCall& call, const py::tuple& args,
                                      const py::dict& kwargs, const std::vector<at::Tensor>& leaves,
                                      const at::Tensor& grad_output) {
  py::list items(args);
  for (size_t i = 0; i < leaves.size(); ++i)
    items[call.positions[i]] = PythonCrossing::owned(THPVariable_Wrap(leaves[i]));
  const py::object result = call.function(*py::tuple(items), **kwargs);
  const at::Tensor out = hooked_output(result, call.output_at);
  if (!out.requires_grad()) return {};
  const at::Tensor grad = grad_output.to(out.scalar_type()).to(out.device());
  // The autograd engine runs without the GIL (it refuses to be entered with it).
  PythonCrossing::WithoutGil engine_runs;
  return torch::autograd::grad({out}, leaves, {grad}, /*retain_graph=*/false,
                               /*create_graph=*/false, /*allow_unused=*/true);
}

// The perturbed inputs of the one-tensor modes: the first input the mode can perturb.
bool perturb_first(PertMode mode, std::vector<at::Tensor>& values) {
  if (mode == PertMode::NoChange) return true;
  std::string why_not;
  for (at::Tensor& v : values) {
    if (!v.is_floating_point()) continue;
    if (auto changed = perturb_one(mode, v, why_not)) {
      v = *changed;
      return true;
    }
  }
  return true;  // run unperturbed, as msprobe does
}

}  // namespace

BackwardCall::~BackwardCall() {
  // The members go after this body, when the GIL is given back: they must be empty by then.
  PythonCrossing::Gil gil;
  py::object(std::move(function));
  py::object(std::move(args));
  py::object(std::move(kwargs));
}

InputGradients input_gradients(const BackwardCall& call, PertMode mode,
                               const at::Tensor& grad_output) {
  InputGradients out;
  py::dict kwargs(call.kwargs);
  if (kwargs.contains("inplace")) kwargs["inplace"] = false;
  out.original = run_gradients(call, call.args, kwargs, leaves_of(call.inputs), grad_output);

  std::vector<at::Tensor> values;
  for (const at::Tensor& v : call.inputs) values.push_back(v.clone());
  py::tuple args = call.args;
  at::Tensor grad = grad_output;
  if (mode == PertMode::ImprovePrecision || mode == PertMode::ToCpu) {
    const bool to_cpu = mode == PertMode::ToCpu;
    RerunArgs mapped = rerun_args(mode, call.args, kwargs, 0);
    bool changed = mapped.perturbed || low_precision(grad);
    for (at::Tensor& v : values) {
      changed |= low_precision(v) || to_cpu;
      if (to_cpu) v = v.to(at::kCPU);
      if (low_precision(v)) v = v.to(at::kFloat);
    }
    if (to_cpu) grad = grad.to(at::kCPU);
    if (low_precision(grad)) grad = grad.to(at::kFloat);
    if (!changed) return out;
    args = mapped.args;
    kwargs = mapped.kwargs;
  } else {
    perturb_first(mode, values);
  }
  out.perturbed = run_gradients(call, args, kwargs, leaves_of(values), grad);
  out.ran = true;
  return out;
}

}  // namespace msprobe
