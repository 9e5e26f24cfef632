// Running statistics (docs/overflow-detection.md, "Running statistics are state"): batch_norm
// writes running_mean / running_var in place without bumping their version counter, and they are
// in no record's outputs, so the guard looks at them after a norm call.
#include "live/overflow/running_stats.h"

#include <cmath>

#include "core/record.h"

namespace msprobe {

// "layer1.0.bn1.running_var" -> "running_var of layer1.0.bn1".
std::string running_stat_text(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return name;
  return name.substr(dot + 1) + " of " + name.substr(0, dot);
}

// "NaN", "+inf", "NaN and -inf".
std::string kinds_text(const KindCounts& k) {
  static const char* const names[3] = {"NaN", "+inf", "-inf"};
  std::string text;
  for (int i = 0; i < 3; ++i) {
    if (k.n[static_cast<size_t>(i)]) text += (text.empty() ? "" : " and ") + std::string(names[i]);
  }
  return text.empty() ? "NaN/inf" : text;
}

// How many NaN, +inf, -inf a tensor holds now, or nothing when it is all finite. A check of a
// handful of channels, made only for the running statistics a call just wrote.
std::optional<KindCounts> nonfinite_now(const at::Tensor& t) {
  if (!t.defined() || !t.is_floating_point() || t.layout() != at::kStrided) return std::nullopt;
  const at::Tensor x = t.detach();
  // The common case, a CPU float32 statistic of a few hundred channels: a plain loop, not three
  // dispatched ops, on every train-mode norm call.
  if (x.is_cpu() && x.scalar_type() == at::kFloat && x.is_contiguous()) {
    const float* p = x.data_ptr<float>();
    bool finite = true;
    for (int64_t i = 0, n = x.numel(); i < n; ++i) finite = finite && std::isfinite(p[i]);
    if (finite) return std::nullopt;
  } else if (at::isfinite(x).all().item<bool>()) {
    return std::nullopt;
  }
  KindCounts k;
  k.n[0] = at::isnan(x).sum().item<int64_t>();
  k.n[1] = at::isposinf(x).sum().item<int64_t>();
  k.n[2] = at::isneginf(x).sum().item<int64_t>();
  return k;
}

// Where the running statistics are among a norm call's arguments (running_mean, running_var).
std::optional<std::pair<size_t, size_t>> running_stat_positions(const std::string& call) {
  const std::string api = torch_api_name(call);
  if (api == "functional.batch_norm" || api == "functional.instance_norm") return {{1, 2}};
  if (api == "torch.batch_norm" || api == "torch.instance_norm") return {{3, 4}};
  return std::nullopt;
}

}  // namespace msprobe
