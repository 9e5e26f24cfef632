// Live overflow detection (task overflow_check, docs/overflow-detection.md): every collected call
// goes through the core Detector as it completes, and each anomaly the detector leaves is either
// *explained*, *absorbed*, or traced to an *origin*:
//   - explained: it derives, within the step, from a non-finite constant passed on purpose
//     (masked_fill(mask, -inf), a one-element ±inf tensor, a constant -inf buffer, a tensor
//     holding only -inf) or an ignore rule expects it, and holds no kind and no more of a kind
//     than its explained inputs held (ExplainedKinds). Never flags a step, never stops.
//   - origin `op`: a call whose inputs were clean made it, or made more than its explained inputs
//     explain (forward; backward: judged at the end of the backward pass by whether it reached a
//     parameter gradient).
//   - origin `input` / `parameter`: it entered the step through a tensor argument that no
//     recorded call of the step made, and reached an output: a parameter or buffer of a started
//     model, else the batch.
//   - absorbed: such a foreign NaN/inf went into a call whose outputs are all finite (nan_to_num,
//     isnan, where). Flags the step the first time its call site absorbs; never stops.
//   - no origin: downstream of an earlier anomaly, or a numerical mutation (a lead, not a flag).
// The first origin named in stop_on stops the run (action raise); findings without an origin stop
// when their level reaches stop_level.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/config.h"
#include "core/detector.h"
#include "core/explained_kinds.h"
#include "core/overflow_decisions.h"
#include "live/capture/live_tensors.h"
#include "live/overflow/model_tensors.h"

namespace msprobe {

// Not thread-safe: it lives in the session's StepState and is reached only under that lock.
class OverflowWatch {
 public:
  // Throws RulesError for an unusable rules file of the config.
  OverflowWatch(const Config& config, const ModelTensors& models);

  // What a started model returned (not a record: msprobe records no started model): held NaN/inf
  // that reached it is caught there; NaN/inf that no recorded call made and none of its
  // arguments brought in was made by its own code (at L0, a loss computed in its forward).
  // `live.enclosing` holds its arguments, `live.maker` names it.
  Verdict judge_model_output(const CallRecord& rec, const LiveTensors& live);
  // `peer_rank`: a collective whose anomalous result came from that rank's anomalous input.
  Verdict judge(const CallRecord& rec, const LiveTensors& live,
                std::optional<int> peer_rank = std::nullopt);
  void new_step();
  // The end of the step: how each held NaN/inf that no call was caught doing damage with ended
  // (by hold id): still in a tensor alive now (its origin's judgement becomes HeldToEnd), else
  // absorbed (Absorbed).
  std::vector<HeldEnd> finish_held();
  // An output of a compiled region (torch.compile), this step.
  void mark_compiled_output(const at::Tensor& t);
  bool compiled_region_ran() const { return !compiled_outputs_.empty(); }

  bool step_flagged() const { return step_flagged_; }
  const std::vector<Finding>& findings() const { return findings_; }
  // Parallel to findings().
  const std::vector<Judgement>& judgements() const { return judgements_; }

 private:
  struct Traced {
    bool explained = true;
    int held = -1;                 // downstream of a held NaN/inf (the damage rule): its id
    bool unheld = false;           // downstream of an anomaly that is not held
    std::optional<Origin> origin;  // a foreign tensor: input or parameter
    std::optional<std::string> parameter;
    std::string note;
    bool running_stat = false;  // the parameter origin is a running statistic: never absorbed
    ExplainedKinds kinds;       // what the explained inputs hold
  };
  // A norm call's running statistic that holds NaN/inf after it: written so by it, or (at L0,
  // in eval mode) loaded so.
  struct RunningStatWrite {
    std::string buffer;  // "layer1.0.bn1.running_var"
    std::string text;    // "running_var of layer1.0.bn1 became +inf (0 NaN, 3 +inf, ...)"
    bool loaded = false;
  };
  std::optional<RunningStatWrite> running_stats_written(const CallRecord& rec,
                                                        const LiveTensors& live) const;
  Verdict judge_running_stat_write(const CallRecord& rec, const LiveTensors& live, Verdict v,
                                   const RunningStatWrite& w);
  // A judged finding that holds nothing: whether it flags the step and stops now, at the end of
  // the backward pass, or never. Returns its final judgement (a flagged lead is flagged).
  Judgement settle(const std::string& call, bool backward, Verdict& v, Judgement judgement);
  Traced trace_forward_inputs(const CallRecord& rec, const Finding& f,
                              const LiveTensors& live) const;
  // `model_output`: `t` is what a started model returns, where a one-element ±inf tensor is
  // a loss or a metric, not a constant.
  void trace_tensor(const Entry& e, const at::Tensor& t, const LiveTensors& live, Traced& out,
                    bool model_output = false) const;
  // trace_tensor's steps; each true when it placed the tensor.
  bool trace_known(const Entry& e, const at::Tensor& t, Traced& out) const;
  bool trace_model_tensor(const Entry& e, const at::Tensor& t, Traced& out) const;
  bool trace_gradient(const at::Tensor& t, Traced& out) const;
  void trace_unmade(const Entry& e, const at::Tensor& t, const LiveTensors& live,
                    Traced& out) const;
  bool backward_explained(const CallRecord& rec, const Finding& f) const;
  // `held`: set to the hold id when the unexplained outputs are all held NaN/inf.
  std::optional<bool> judged_inside(const CallRecord& rec, const Finding& f,
                                    const LiveTensors& live, int* held) const;
  void remember_outputs(const CallRecord& rec, const LiveTensors& live, bool explained,
                        int held = -1);
  // The damage rule: what this call did with the NaN/inf of its outputs that ends its hold
  // ("entered a tensor that requires grad", ...), or "" when it can still be cleaned.
  std::string damage(const CallRecord& rec, const LiveTensors& live) const;
  Judgement classify(const CallRecord& rec, const LiveTensors& live, std::optional<int> peer_rank,
                     Verdict& v, int& held_in) const;
  Judgement apply_damage_rule(const CallRecord& rec, const LiveTensors& live, Verdict& v,
                              int& held_in, const std::string& written, bool from_peer);
  bool held_tensor(const at::Tensor& t) const;

  Detector detector_;
  const OverflowSection& options_;
  const ModelTensors& models_;
  const Level level_;

  // Per step. Anomalous tensors made by recorded calls, by identity, and whether explained.
  using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  struct Known {
    WeakImpl weak;
    bool explained;
    int held = -1;     // NaN/inf held under the damage rule: the id of its origin
    std::string call;  // the call that made it
    uint64_t order;    // when: the latest of a hold's tensors alive at the end names it
  };
  // The damage rule's holds of this step, by id: the origin's kind and its finding's index.
  struct HeldOrigin {
    Origin origin;
    size_t finding;
    bool caught = false;
    std::string turned_finite_by;  // the first call that took it and gave finite outputs
  };
  std::vector<HeldOrigin> held_;
  std::unordered_map<const c10::TensorImpl*, Known> known_;
  uint64_t known_order_ = 0;
  std::unordered_set<std::string> unexplained_forwards_;
  std::unordered_map<const c10::TensorImpl*, WeakImpl> compiled_outputs_;
  // For the session: call sites ("Torch.nan_to_num.forward") that absorbed a foreign anomaly.
  std::unordered_set<std::string> absorbing_sites_;
  bool backward_anomaly_ = false;  // later unknown anomalous tensors are its gradients
  std::vector<Finding> findings_;
  std::vector<Judgement> judgements_;
  bool step_flagged_ = false;
};

}  // namespace msprobe
