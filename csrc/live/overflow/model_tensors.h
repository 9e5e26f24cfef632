// The parameters and buffers of the models given to start(): how NaN/inf that entered through one
// is named (origin `parameter`), and which parameter gradients a backward anomaly reached.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace msprobe {

class ModelTensors {
 public:
  struct Found {
    std::string name;  // qualified, with the model's prefix
    bool buffer = false;
    bool never_written = false;      // unchanged since the model was started: a constant
    bool written_this_step = false;  // changed since this step's start()
    // running_mean / running_var: state that batch_norm writes in place without bumping the
    // version counter (both torches), so never_written says nothing about it.
    bool running_stat = false;
  };

  // Not thread-safe: the session calls these under its step lock.
  void add(const std::string& name, const at::Tensor& t, bool buffer);
  bool empty() const { return entries_.empty(); }

  // What "before this step" means for Found::written_this_step. Running statistics written since
  // they were last looked at (by anything but a norm, which bumps no version: a checkpoint, a
  // fill) are looked at now, so that NaN/inf a norm finds there after a train-mode call is known
  // to have come in with them. Also notes whether an earlier step left gradients.
  void new_step();
  // An earlier step of this debugger left the parameters gradients (not set to None).
  bool earlier_step_left_gradients() const { return gradients_left_; }
  std::optional<Found> find(const at::Tensor& t) const;
  // The parameter whose gradient (.grad) `t` is. A walk over the parameters: for anomalous
  // tensors only.
  std::optional<std::string> gradient_of(const at::Tensor& t) const;
  // The running statistics of the module named `qualname` (its running_mean, running_var), and
  // whether it is in train mode this step: its num_batches_tracked was written since start().
  struct RunningStat {
    std::string name;
    at::Tensor tensor;
    // It held NaN/inf before this step's norm calls (loaded so, or written by something other
    // than a norm since the step began): what it holds came in with it.
    bool came_in_bad = false;
  };
  struct RunningStats {
    std::vector<RunningStat> stats;
    bool trained_this_step = false;
  };
  RunningStats running_stats_of(const std::string& qualname) const;
  // The first parameter or buffer under the module `qualname` ("" for all) that holds NaN/inf
  // now: at L0, where a module's weights are in no record, what names a NaN weight. Reads each
  // of them: for a module that made NaN/inf from clean inputs only.
  std::optional<std::string> nonfinite_under(const std::string& qualname) const;

  // The parameters' floating-point gradients, with their names: what non_finite_gradients()
  // looks at, taken under the step's lock so the look itself (a device sync) can come after it.
  std::vector<std::pair<std::string, at::Tensor>> gradients() const;

 private:
  using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  struct Item {
    std::string name;
    WeakImpl weak;
    bool buffer;
    uint32_t version_at_add;
    uint32_t version_at_step;
    // Running statistics: the version at which it was last looked at, and what was seen.
    std::optional<uint32_t> version_looked_at;
    bool nonfinite_when_looked_at = false;
  };
  std::vector<Item> entries_;
  std::unordered_map<const c10::TensorImpl*, size_t> index_;
  std::unordered_map<std::string, size_t> by_name_;  // buffers
  bool stepped_ = false;
  bool gradients_left_ = false;
};

// The names of `gradients` (ModelTensors::gradients()) that hold NaN or ±inf, in their order. A
// CPU tensor is read in place; the others in one multi-tensor pass and one sync per device and
// dtype while they are clean.
std::vector<std::string> non_finite_gradients(
    const std::vector<std::pair<std::string, at::Tensor>>& gradients);

}  // namespace msprobe
