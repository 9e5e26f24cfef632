#include "live/free_benchmark/perturbation.h"

#include <torch/csrc/autograd/python_variable.h>

#include <cmath>
#include <functional>
#include <limits>

#include "live/crossing/python_crossing.h"
#include "live/capture/is_tensor.h"

namespace py = pybind11;

namespace msprobe {
namespace {

py::object wrap(const at::Tensor& t) {
  return PythonCrossing::owned(THPVariable_Wrap(t));
}

// `obj` rebuilt with `change` applied to each tensor, as the same kind of container.
py::object map_tensors(
    const py::handle& obj,
    const std::function<py::object(const at::Tensor&, const py::handle&)>& change) {
  if (is_tensor(obj)) return change(tensor_of(obj), obj);
  if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
    py::list items;
    for (const py::handle item : obj) items.append(map_tensors(item, change));
    if (py::isinstance<py::tuple>(obj)) return py::tuple(items);
    return py::object(std::move(items));
  }
  if (py::isinstance<py::dict>(obj)) {
    py::dict out;
    for (const auto& [key, value] : py::reinterpret_borrow<py::dict>(obj))
      out[key] = map_tensors(value, change);
    return py::object(std::move(out));
  }
  return py::reinterpret_borrow<py::object>(obj);
}

at::ScalarType int_view_of(FloatKind k) {
  switch (k) {
    case FloatKind::Half:
    case FloatKind::BFloat16:
      return at::kShort;
    case FloatKind::Float:
      return at::kInt;
    default:
      return at::kLong;
  }
}

// msprobe's _check_details of add_noise and bit_noise.
bool noise_applies(const at::Tensor& t, std::string& why_not) {
  const auto value = perturbation_value(float_kind(t.scalar_type()));
  if (!value) {
    why_not = "dtype unsupported. Cancel perturbation.";
    return false;
  }
  if (t.numel() == 0) {
    why_not = "tensor shape must > 0. Cancel adding noise.";
    return false;
  }
  if (at::abs(t).max().item<double>() < *value) {
    why_not = "Maximun value is less than the minimun threshold. Cancel add noise.";
    return false;
  }
  return true;
}

double smallest_normal(FloatKind k) {
  switch (k) {
    case FloatKind::Half:
      return 6.103515625e-05;
    case FloatKind::Double:
      return std::numeric_limits<double>::min();
    default:
      return static_cast<double>(std::numeric_limits<float>::min());
  }
}

std::optional<at::Tensor> change_value(const at::Tensor& t, std::string& why_not) {
  if (t.dim() > 1 ? (t.size(1) == 0 || (t.size(1) < 2 && t.size(0) < 2) || t.size(0) == 0)
                  : (t.dim() == 0 || t.size(0) < 2)) {
    why_not = "too few elements to swap. Cancel change value.";
    return std::nullopt;
  }
  at::Tensor n = t.clone();
  if (n.dim() == 1) {
    at::Tensor first = n[0].clone(), last = n[-1].clone();
    n[0] = last;
    n[-1] = first;
  } else {  // for ndim >= 3 these are whole slices, as msprobe swaps them
    at::Tensor first = n[0][0].clone(), last = n[-1][-1].clone();
    n[0][0] = last;
    n[-1][-1] = first;
  }
  return n;
}

}  // namespace

FloatKind float_kind(at::ScalarType t) {
  switch (t) {
    case at::kHalf:
      return FloatKind::Half;
    case at::kBFloat16:
      return FloatKind::BFloat16;
    case at::kFloat:
      return FloatKind::Float;
    case at::kDouble:
      return FloatKind::Double;
    default:
      return FloatKind::Other;
  }
}

std::optional<size_t> fuzzed_argument(const py::tuple& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const py::handle a = args[i];
    if (is_tensor(a)) {
      const at::Tensor& t = tensor_of(a);
      if (!t.is_meta() && t.is_floating_point()) return i;
    } else if (py::isinstance<py::list>(a) || py::isinstance<py::tuple>(a) ||
               py::isinstance<py::dict>(a)) {
      return i;
    }
  }
  return std::nullopt;
}

std::optional<at::Tensor> perturb_one(PertMode mode, const at::Tensor& t, std::string& why_not) {
  const FloatKind kind = float_kind(t.scalar_type());
  switch (mode) {
    case PertMode::AddNoise: {
      if (!noise_applies(t, why_not)) return std::nullopt;
      const double pv = *perturbation_value(kind);
      return at::where(at::abs(t) > std::sqrt(pv), at::full(t.sizes(), pv, t.options()) + t, t);
    }
    case PertMode::BitNoise: {
      if (kind == FloatKind::Other) {
        why_not = "dtype unsupported. Cancel perturbation.";
        return std::nullopt;
      }
      if (!noise_applies(t, why_not)) return std::nullopt;
      const at::ScalarType int_t = int_view_of(kind);
      const at::Tensor bits = t.view(int_t);
      const at::Tensor flipped =
          at::bitwise_xor(bits, at::ones(t.sizes(), t.options().dtype(int_t)));
      return at::where(at::abs(t) > smallest_normal(kind), flipped, bits).view(t.scalar_type());
    }
    case PertMode::ChangeValue:
      return change_value(t, why_not);
    default:
      return t;
  }
}

RerunArgs rerun_args(PertMode mode, const py::tuple& args, const py::dict& kwargs, size_t fuzzed) {
  RerunArgs out;
  out.kwargs = py::dict(kwargs);  // a copy: the caller's dict is not changed
  if (out.kwargs.contains("inplace") && mode != PertMode::ToCpu) out.kwargs["inplace"] = false;
  for (const char* running : {"running_mean", "running_var"})  // batch norm writes into them
    if (out.kwargs.contains(running)) out.kwargs[running] = copy_tensors(out.kwargs[running]);
  if (mode == PertMode::ImprovePrecision || mode == PertMode::ToCpu) {
    const bool to_cpu = mode == PertMode::ToCpu;
    auto change = [&](const at::Tensor& t, const py::handle& h) -> py::object {
      const bool low = t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
      if (!to_cpu && !(t.is_floating_point() && low)) return py::reinterpret_borrow<py::object>(h);
      at::Tensor moved = to_cpu ? t.detach().to(at::kCPU) : t;
      if (low) moved = moved.to(at::kFloat);
      out.perturbed |= low || to_cpu;
      return wrap(moved);
    };
    out.args = py::tuple(map_tensors(args, change));
    out.kwargs = py::reinterpret_borrow<py::dict>(map_tensors(out.kwargs, change));
    out.rerun = out.perturbed;
    return out;
  }
  // One tensor of the fuzzed argument: the first that the mode can perturb.
  auto change = [&](const at::Tensor& t, const py::handle& h) -> py::object {
    if (out.perturbed || !t.is_floating_point() || mode == PertMode::NoChange)
      return py::reinterpret_borrow<py::object>(h);
    std::optional<at::Tensor> changed = perturb_one(mode, t, out.why_not);
    if (!changed) return py::reinterpret_borrow<py::object>(h);
    out.perturbed = true;
    return wrap(*changed);
  };
  py::list items;
  for (size_t i = 0; i < args.size(); ++i)
    items.append(i == fuzzed ? map_tensors(args[i], change)
                             : py::reinterpret_borrow<py::object>(args[i]));
  out.args = py::tuple(items);
  return out;
}

bool holds_low_precision(const py::handle& obj) {
  if (is_tensor(obj)) {
    const at::ScalarType t = tensor_of(obj).scalar_type();
    return t == at::kHalf || t == at::kBFloat16;
  }
  if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
    for (const py::handle item : obj)
      if (holds_low_precision(item)) return true;
    return false;
  }
  if (py::isinstance<py::dict>(obj)) {
    for (const auto& entry : py::reinterpret_borrow<py::dict>(obj))
      if (holds_low_precision(entry.second)) return true;
  }
  return false;
}

py::object copy_tensors(const py::handle& obj) {
  return map_tensors(
      obj, [](const at::Tensor& t, const py::handle&) { return wrap(t.detach().clone()); });
}

}  // namespace msprobe
