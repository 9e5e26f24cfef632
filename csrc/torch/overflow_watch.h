// Live overflow detection (task overflow_check, SPEC §4-6): every collected call goes through the
// core Detector as it completes. A step is *flagged* (and dumped) when a finding reaches the
// stop_level, or when an anomaly cannot be explained: anomalies that derive, within the step,
// from a non-finite constant the code passed on purpose (masked_fill(mask, -inf) and what consumes
// it) are explained; NaN or inf that came in with the data, the weights or an overflow are not.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/config.h"
#include "core/detector.h"

namespace msprobe {

// The live tensors of a call by top-level position (undefined where an argument is no tensor).
struct LiveTensors {
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> kwargs;  // in the record's kwargs order
  std::vector<at::Tensor> outputs;
};

// The tensor at position `i`, or null where there is none.
inline const at::Tensor* tensor_at(const std::vector<at::Tensor>& v, size_t i) {
  return i < v.size() && v[i].defined() ? &v[i] : nullptr;
}

struct Verdict {
  std::optional<Finding> finding;
  bool flagged = false;  // makes the step dumped
  bool stop = false;     // action raise, level >= stop_level
};

class OverflowWatch {
 public:
  // Throws RulesError for an unusable rules file of the config.
  explicit OverflowWatch(const Config& config);

  Verdict judge(const CallRecord& rec, const LiveTensors& live);
  void new_step();

  bool step_flagged() const { return step_flagged_; }
  const std::vector<Finding>& findings() const { return findings_; }
  // Parallel to findings(): whether each one flagged the step (the others were explained).
  const std::vector<bool>& flagged() const { return flagged_; }
  // The step's first flagged finding, whatever its level: where NaN or inf entered.
  const std::optional<Finding>& first_flagged() const { return first_flagged_; }
  // overflow_nums reached: nothing more is collected after this step.
  bool exhausted() const { return max_flagged_ >= 0 && flagged_total_ >= max_flagged_; }

 private:
  bool explained(const CallRecord& rec, const Finding& f, const LiveTensors& live) const;
  bool known(const at::Tensor& t) const;
  void remember_outputs(const CallRecord& rec, const LiveTensors& live);

  Detector detector_;
  Severity stop_level_;
  bool raise_;
  int64_t max_flagged_;
  int64_t flagged_total_ = 0;

  // Per step.
  std::vector<c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>> explained_;
  std::unordered_set<std::string> unexplained_forwards_;
  std::vector<Finding> findings_;
  std::vector<bool> flagged_;
  std::optional<Finding> first_flagged_;
  bool step_flagged_ = false;
};

}  // namespace msprobe
