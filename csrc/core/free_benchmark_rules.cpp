#include "core/free_benchmark_rules.h"

#include <algorithm>
#include <cmath>

#include "core/python_text.h"

namespace msprobe {

const char* to_string(PertMode m) {
  switch (m) {
    case PertMode::ImprovePrecision:
      return "improve_precision";
    case PertMode::AddNoise:
      return "add_noise";
    case PertMode::BitNoise:
      return "bit_noise";
    case PertMode::ChangeValue:
      return "change_value";
    case PertMode::NoChange:
      return "no_change";
    case PertMode::ToCpu:
      return "to_cpu";
  }
  return "unknown";
}

const char* to_string(FuzzStage s) {
  return s == FuzzStage::Forward ? "forward" : "backward";
}

std::optional<double> perturbation_value(FloatKind k) {
  switch (k) {
    case FloatKind::BFloat16:
      return 1e-4;
    case FloatKind::Half:
      return 1e-6;
    case FloatKind::Float:
      return 1e-8;
    case FloatKind::Double:
      return 1e-16;
    case FloatKind::Other:
      return std::nullopt;
  }
  return std::nullopt;
}

double ratio_tolerance(FloatKind perturbed, FuzzStage stage) {
  if (stage == FuzzStage::Backward) return 1e-3;
  return std::sqrt(perturbation_value(perturbed).value_or(1e-8));
}

double ratio_threshold(FloatKind original, PertMode mode) {
  if (mode == PertMode::NoChange) return 1.0;
  if (original == FloatKind::Half) return 1.002;
  if (original == FloatKind::BFloat16) return 1.004;
  return 1.0002;
}

bool consistent(double ratio, double threshold) {
  return threshold >= ratio && ratio >= 1.0 / threshold;
}

int64_t ratio_chunks(int64_t bytes, int64_t ndim) {
  const double mib = static_cast<double>(bytes) / 1048576.0;
  if (mib == 0 || ndim == 0) return 1;
  // int(math.log(mib, 2)) - 4: truncated toward zero, as Python's int() does.
  const int64_t exponent = static_cast<int64_t>(std::log(mib) / std::log(2.0)) - 4;
  if (exponent <= 0) return 1;
  return std::min<int64_t>(int64_t(1) << std::min<int64_t>(exponent, 7), 128);
}

std::string skip_reason(const std::string& api, bool has_out_argument) {
  if (has_out_argument)
    return "it writes into its out= argument, which a second run would overwrite";
  if (api.rfind("Distributed.", 0) == 0)
    return "a collective: a second run would wait for the other ranks, which make it once";
  const std::string op = api.substr(api.find('.') + 1);
  static const char* const kRandom[] = {
      "dropout",        "dropout_",       "alpha_dropout", "feature_alpha_dropout",
      "dropout1d",      "dropout2d",      "dropout3d",     "rrelu",
      "rrelu_",         "bernoulli",      "bernoulli_",    "multinomial",
      "normal",         "normal_",        "poisson",       "rand",
      "rand_like",      "randint",        "randint_like",  "randn",
      "randn_like",     "randperm",       "uniform_",      "exponential_",
      "geometric_",     "cauchy_",        "log_normal_",   "random_",
      "gumbel_softmax", "native_dropout", "fused_dropout", "feature_dropout"};
  for (const char* name : kRandom)
    if (op == name) return kRandomReason;
  return "";
}

std::vector<size_t> written_statistics(const std::string& api) {
  if (api == "Functional.batch_norm" || api == "Functional.instance_norm") return {1, 2};
  if (api == "Torch.batch_norm" || api == "Torch.instance_norm" ||
      api == "Torch.native_batch_norm" || api == "Torch._native_batch_norm_legit")
    return {3, 4};
  return {};
}

std::string free_benchmark_header() {
  return csv_row({"rank", "pert_mode", "stage", "step", "api_name", "max_rel", "dtype", "shape",
                  "output_index"});
}

std::string free_benchmark_row(const UnequalRow& r) {
  return csv_row({std::to_string(r.rank), r.pert_mode, r.stage, std::to_string(r.step), r.api_name,
                  r.ratio ? python_float(*r.ratio - 1) : "", r.dtype,
                  r.has_shape ? "torch.Size(" + python_int_list(r.shape) + ")" : "",
                  r.output_index ? std::to_string(*r.output_index) : ""});
}

}  // namespace msprobe
