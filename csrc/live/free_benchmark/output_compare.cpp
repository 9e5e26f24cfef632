#include "live/free_benchmark/output_compare.h"

#include <ATen/ATen.h>
#include <torch/version.h>

#include <cmath>
#include <limits>

#include "live/free_benchmark/perturbation.h"

namespace msprobe {
namespace {

double finite_or_one(double v) {
  return std::isfinite(v) ? v : 1.0;
}

struct SingleLimits {
  double rtol, small_value, small_value_atol, err_balance;
};

SingleLimits single_limits(at::ScalarType t) {
  if (t == at::kHalf) return {std::ldexp(1.0, -11), 1.0, std::ldexp(1.0, -11), 1e-4};
  if (t == at::kBFloat16) return {std::ldexp(1.0, -8), 1.0, std::ldexp(1.0, -8), 1e-4};
  return {std::ldexp(1.0, -14), 1.0, std::ldexp(1.0, -14), 1e-4};
}

}  // namespace

double output_ratio(const at::Tensor& original, const at::Tensor& perturbed_output,
                    FuzzStage stage) {
  at::Tensor o, perturbed = perturbed_output;
  try {
    o = original.to(perturbed.scalar_type()).to(perturbed.device());
  } catch (const std::exception&) {
    return std::nan("");
  }
#if TORCH_VERSION_MAJOR < 2
  // torch 1.13 has no float16 clamp on the CPU (msprobe 1.1.1 needs torch 2): the ratio of a
  // float16 output is taken in float32 there, from the same float16 values.
  if (perturbed.scalar_type() == at::kHalf && perturbed.device().is_cpu()) {
    o = o.to(at::kFloat);
    perturbed = perturbed.to(at::kFloat);
  }
#endif
  const double tol = ratio_tolerance(float_kind(perturbed_output.scalar_type()), stage);
  const int64_t chunks = ratio_chunks(int64_t(o.element_size()) * o.numel(), o.dim());
  std::vector<at::Tensor> parts_o = {o}, parts_p = {perturbed};
  if (chunks > 1 || (o.dim() > 0 && o.numel() > 0)) {
    parts_o = at::tensor_split(o.reshape({-1}), chunks);
    parts_p = at::tensor_split(perturbed.reshape({-1}), chunks);
  }
  double norm1 = -std::numeric_limits<double>::infinity(), norm2 = norm1;
  for (size_t i = 0; i < parts_o.size(); ++i) {
    const at::Tensor& co = parts_o[i];
    const at::Tensor& cp = parts_p[i];
    if (co.numel() == 0) break;
    const at::Tensor r1 =
        at::where(at::abs(cp) > tol, at::div(at::clamp(co, tol), at::clamp(cp, tol)), 1);
    const at::Tensor r2 =
        at::where(at::abs(co) > tol, at::div(at::clamp(cp, tol), at::clamp(co, tol)), 1);
    const at::Tensor both = at::stack({r1.max(), r2.max()}).to(at::kDouble).cpu();
    norm1 = std::max(norm1, finite_or_one(both[0].item<double>()));
    norm2 = std::max(norm2, finite_or_one(both[1].item<double>()));
  }
  return std::max(norm1, norm2);
}

bool single_compare(const at::Tensor& actual, const at::Tensor& golden) {
  if ((at::isinf(golden).sum() + at::isnan(golden).sum()).item<int64_t>() > 0) return true;
  const SingleLimits lim = single_limits(actual.scalar_type());
  const at::Tensor a = at::where(at::isfinite(actual), actual, 1).to(at::kDouble);
  const at::Tensor g = golden.to(at::kDouble).to(a.device());
  const at::Tensor d = a - g;
  const at::Tensor small = at::abs(a) < lim.small_value;
  const double abs_err = at::where(small, at::abs(d), 0).max().item<double>();
  const double rel_err = at::where(small, 0, at::abs(d) / at::abs(g)).max().item<double>();
  const double balance =
      (d / at::where(at::abs(g) >= lim.small_value, at::abs(g), 1)).mean().item<double>();
  return !(abs_err > lim.small_value_atol || rel_err > lim.rtol || balance > lim.err_balance);
}

}  // namespace msprobe
