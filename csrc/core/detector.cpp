#include "core/detector.h"

#include <tuple>

#include <algorithm>
#include <cmath>

#include "core/anomaly.h"

namespace msprobe {

const char* scene_name(Scene s) {
  switch (s) {
    case Scene::InputNormalOutputAnomaly:
      return "InputNormalOutputAnomalyScene";
    case Scene::InputAnomalyOutputAnomaly:
      return "InputAnomalyOutputAnomalyScene";
    case Scene::InputAnomalyOutputNormal:
      return "InputAnomalyOutputNormalScene";
    case Scene::NumericalMutation:
      return "NumericalMutationScene";
  }
  return "";
}

Severity scene_severity(Scene s) {
  switch (s) {
    case Scene::InputNormalOutputAnomaly:
      return Severity::Critical;
    case Scene::InputAnomalyOutputAnomaly:
      return Severity::High;
    case Scene::InputAnomalyOutputNormal:
      return Severity::Medium;
    case Scene::NumericalMutation:
      return Severity::High;
  }
  return Severity::Medium;
}

namespace {

// Running maximum of the non-NaN Norms of top-level tensor entries (msprobe 1.1.1's norm lists).
struct NormMax {
  bool any = false;
  double value = 0.0;
  void take(const Entry& e) {
    if (!e.is_tensor() || !e.norm.is_number()) return;
    const double v = e.norm.as_double();
    if (std::isnan(v)) return;
    value = any ? std::max(value, v) : v;
    any = true;
  }
};

}  // namespace

bool Finding::lists(const ArgPos& pos) const {
  auto has = [](const auto& list, const auto& value) {
    return std::find(list.begin(), list.end(), value) != list.end();
  };
  switch (pos.side) {
    case ArgPos::Side::Input:
      return has(input_indices, pos.index);
    case ArgPos::Side::Kwarg:
      return has(kwarg_keys, *pos.key);
    case ArgPos::Side::Output:
      break;
  }
  return has(output_indices, pos.index);
}

std::optional<std::pair<double, double>> mutation_norms(const CallRecord& rec) {
  NormMax in, out;
  for_each_arg(rec, [&](const ArgPos& pos, const Entry& e) {
    (pos.side == ArgPos::Side::Output ? out : in).take(e);
  });
  if (!in.any || !out.any) return std::nullopt;
  return std::make_pair(in.value, out.value);
}

bool numerical_mutation(const CallRecord& rec, double t) {
  const auto norms = mutation_norms(rec);
  if (!norms) return false;
  const NormMax in{true, norms->first}, out{true, norms->second};
  if (in.value == 0.0) return out.value > t;
  return out.value / in.value > t;
}

bool ignores_first_arg_values(const std::string& call_name) {
  // Writers: every element of the destination is replaced. Creation from a template tensor: only
  // its metadata is read. (masked_fill_, index_fill_ and the like keep some old values: not here.)
  static const std::unordered_set<std::string> kApis = {
      "tensor.zero_",      "tensor.fill_",       "tensor.uniform_",      "tensor.normal_",
      "tensor.copy_",      "tensor.random_",     "tensor.exponential_",  "tensor.geometric_",
      "tensor.cauchy_",    "tensor.log_normal_", "tensor.bernoulli_",    "tensor.new_zeros",
      "tensor.new_ones",   "tensor.new_full",    "tensor.new_empty",     "tensor.new_empty_strided",
      "tensor.new_tensor", "torch.zero_",        "torch.fill_",          "torch.zeros_like",
      "torch.ones_like",   "torch.full_like",    "torch.empty_like",     "torch.rand_like",
      "torch.randn_like",  "torch.randint_like", "torch._foreach_zero_", "torch._foreach_copy_",
  };
  return !is_backward_name(call_name) && kApis.count(torch_api_name(call_name)) > 0;
}

bool makes_view_of_first_arg(const std::string& call_name) {
  static const std::unordered_set<std::string> kApis = {
      "tensor.narrow",     "torch.narrow",      "tensor.view",        "tensor.view_as",
      "tensor.select",     "torch.select",      "tensor.as_strided",  "torch.as_strided",
      "tensor.__getitem__", "tensor.unfold",    "tensor.expand",      "tensor.expand_as",
      "tensor.split",      "torch.split",       "tensor.chunk",       "torch.chunk",
      "tensor.unbind",     "torch.unbind",      "tensor.diagonal",    "torch.diagonal",
      "tensor.transpose",  "torch.transpose",   "tensor.t",           "torch.t",
      "tensor.permute",    "torch.permute",     "tensor.squeeze",     "torch.squeeze",
      "tensor.unsqueeze",  "torch.unsqueeze",   "tensor.movedim",     "torch.movedim",
      "tensor.split_with_sizes", "torch.split_with_sizes", "tensor.unflatten", "torch.unflatten",
  };
  return !is_backward_name(call_name) && kApis.count(torch_api_name(call_name)) > 0;
}

bool writes_first_arg(const std::string& call_name) {
  static const std::unordered_set<std::string> kMetadataOnly = {
      "requires_grad_", "share_memory_", "resize_",    "resize_as_", "set_",     "detach_",
      "as_strided_",    "squeeze_",      "unsqueeze_", "t_",         "transpose_", "swapdims_",
      "swapaxes_",      "rename_",       "refine_names_",
  };
  static const std::unordered_set<std::string> kAssignments = {
      "__setitem__", "__iadd__", "__isub__",    "__imul__",    "__itruediv__", "__ifloordiv__",
      "__imod__",    "__ipow__", "__iand__",    "__ior__",     "__ixor__",     "__ilshift__",
      "__irshift__", "__imatmul__",
  };
  if (is_backward_name(call_name)) return false;
  const std::string api = torch_api_name(call_name);
  const size_t dot = api.find('.');
  if (dot == std::string::npos) return false;
  const std::string kind = api.substr(0, dot);
  const std::string method = api.substr(dot + 1);
  if (kind != "tensor" && kind != "torch") return false;
  if (kAssignments.count(method)) return true;
  const size_t n = method.size();
  return n > 1 && method[n - 1] == '_' && method[n - 2] != '_' && !kMetadataOnly.count(method);
}

std::optional<Scene> Detector::match_scene(const CallRecord& rec, bool input_anomaly,
                                           bool output_anomaly) const {
  if (!input_anomaly && output_anomaly) return Scene::InputNormalOutputAnomaly;
  if (input_anomaly && output_anomaly) return Scene::InputAnomalyOutputAnomaly;
  if (input_anomaly && !output_anomaly) return Scene::InputAnomalyOutputNormal;
  if (numerical_mutation(rec, options_.mutation_threshold)) return Scene::NumericalMutation;
  return std::nullopt;
}

std::optional<Finding> Detector::judge(const CallRecord& rec, bool* filtered) {
  if (filtered) *filtered = false;
  const bool compat = options_.compat;
  Finding f;
  f.uses_input_key = rec.uses_input_key;
  for_each_arg(rec, [&](const ArgPos& pos, const Entry& e) {
    // An `out=` buffer is written, not read (outside compat mode).
    if (pos.side == ArgPos::Side::Kwarg && !compat && *pos.key == "out") return;
    if (!holds_anomaly(e, compat)) return;
    switch (pos.side) {
      case ArgPos::Side::Input:
        f.input_indices.push_back(pos.index);
        break;
      case ArgPos::Side::Kwarg:
        f.kwarg_keys.push_back(*pos.key);
        break;
      case ArgPos::Side::Output:
        f.output_indices.push_back(pos.index);
        break;
    }
  });
  // What a call overwrites without reading is no input of its own (outside compat mode). Asked
  // only when that argument holds an anomaly: clean calls pay no name lookup.
  if (!compat && !f.input_indices.empty() && f.input_indices[0] == 0 &&
      ignores_first_arg_values(rec.name)) {
    f.input_indices.erase(f.input_indices.begin());
  }
  bool input_anomaly = !f.input_indices.empty() || !f.kwarg_keys.empty();
  const bool output_anomaly = !f.output_indices.empty();

  if (!compat) {
    const std::string forward = forward_name_of(rec.name);
    if (forward.empty()) {
      if (input_anomaly || output_anomaly) anomalous_forwards_.insert(rec.name);
    } else if (options_.names_unique ? anomalous_forwards_.erase(forward) > 0
                                     : anomalous_forwards_.count(forward) > 0) {
      input_anomaly = true;
    }
  }

  const std::optional<Scene> scene = match_scene(rec, input_anomaly, output_anomaly);
  if (!scene) return std::nullopt;
  const IgnoreRule* rule = rules_.find(torch_api_name(rec.name));
  // The shipped rules of collectives excuse the old contents of a receive buffer (an input).
  // What the collective received is its output (outside compat mode, where the buffer is
  // recorded as the output): NaN/inf there came from a peer, and no such rule excuses it.
  const bool received = !compat && output_anomaly && rec.name.rfind("Distributed.", 0) == 0;
  if (rule && !received && rule->covers(rec, compat)) {
    if (filtered) *filtered = true;
    return std::nullopt;
  }

  f.call = rec.name;
  f.scene = *scene;
  f.severity = scene_severity(*scene);
  if (*scene == Scene::NumericalMutation) {
    f.threshold = options_.mutation_threshold;
    std::tie(f.input_norm, f.output_norm) = *mutation_norms(rec);
  }
  return f;
}

}  // namespace msprobe
