#include "torch/overflow_watch.h"

#include "core/anomaly.h"

namespace msprobe {

namespace {

RuleSet rules_of(const Config& config) {
  RuleSet rules = RuleSet::shipped();
  for (const std::string& file : config.overflow_check.rules) rules.add_file(file);
  return rules;
}

}  // namespace

OverflowWatch::OverflowWatch(const Config& config)
    : detector_(rules_of(config), DetectorOptions{config.overflow_check.mutation_threshold,
                                                  config.overflow_check.compat}),
      stop_level_(config.overflow_check.stop_level),
      raise_(config.overflow_check.action == Action::Raise),
      max_flagged_(config.overflow_check.overflow_nums) {}

void OverflowWatch::new_step() {
  detector_.reset();
  explained_.clear();
  unexplained_forwards_.clear();
  findings_.clear();
  flagged_.clear();
  first_flagged_.reset();
  step_flagged_ = false;
}

bool OverflowWatch::known(const at::Tensor& t) const {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  for (const auto& weak : explained_) {
    auto strong = weak.lock();
    if (strong.get() == impl) return true;
  }
  return false;
}

void OverflowWatch::remember_outputs(const CallRecord& rec, const LiveTensors& live) {
  for (size_t i = 0; i < rec.outputs.size(); ++i) {
    const at::Tensor* t = tensor_at(live.outputs, i);
    if (t && holds_anomaly(rec.outputs[i], detector_.options().compat)) {
      explained_.emplace_back(t->getIntrusivePtr());
    }
  }
}

bool OverflowWatch::explained(const CallRecord& rec, const Finding& f,
                              const LiveTensors& live) const {
  switch (f.scene) {
    case Scene::NumericalMutation:
      return true;  // finite data: nothing to trace
    case Scene::InputNormalOutputAnomaly:
      return false;  // an origin
    default:
      break;
  }
  auto explained_entry = [&](const Entry& e, const at::Tensor* t) {
    if (e.kind == Entry::Kind::Object && !e.is_tensor()) return true;  // a constant, on purpose
    return t && known(*t);
  };
  for (size_t i : f.input_indices) {
    if (!explained_entry(rec.inputs[i], tensor_at(live.inputs, i))) return false;
  }
  for (size_t j = 0; j < rec.kwargs.size(); ++j) {
    const auto& kv = rec.kwargs[j];
    const bool anomalous =
        std::find(f.kwarg_keys.begin(), f.kwarg_keys.end(), kv.first) != f.kwarg_keys.end();
    if (anomalous && !explained_entry(kv.second, tensor_at(live.kwargs, j))) return false;
  }
  // A backward call inherits its forward's anomaly, and with it the forward's explanation.
  const std::string forward = forward_name_of(rec.name);
  return forward.empty() || !unexplained_forwards_.count(forward);
}

Verdict OverflowWatch::judge(const CallRecord& rec, const LiveTensors& live) {
  Verdict v;
  bool filtered = false;
  v.finding = detector_.judge(rec, &filtered);
  if (filtered) {
    remember_outputs(rec, live);  // an ignore rule says this anomaly is expected
    return v;
  }
  if (!v.finding) return v;
  const Finding& f = *v.finding;
  if (explained(rec, f, live)) {
    remember_outputs(rec, live);
  } else {
    if (forward_name_of(rec.name).empty()) unexplained_forwards_.insert(rec.name);
    v.flagged = true;
  }
  if (f.severity >= stop_level_) v.flagged = true;
  v.stop = raise_ && f.severity >= stop_level_;
  findings_.push_back(f);
  flagged_.push_back(v.flagged);
  if (v.flagged) {
    if (!step_flagged_) first_flagged_ = f;
    step_flagged_ = true;
    ++flagged_total_;
  }
  return v;
}

}  // namespace msprobe
