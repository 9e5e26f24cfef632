// What the training monitor's hooks see during a step (issue 55), kept until the step's end:
// the modules' activations and their gradients (xy_distribution: actv, actv_grad) and the
// parameters' gradients where autograd accumulates them (wg_distribution: grad_unreduced). The
// hooks run on the training thread (forwards) and on the threads that run the backward; each
// table is guarded by one lock, and nothing is computed on a step that is not written.
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/monitor_config.h"
#include "core/monitor_row_table.h"
#include "live/hooks/module_observer.h"
#include "live/monitor/monitor_stats.h"
#include "live/monitor/monitor_structure.h"
#include "live/stats/tensor_version_map.h"

namespace msprobe {

class MonitorHookRows final : public ModuleObserver {
 public:
  // `per_micro_step`: monitor_mbs_grad, a row of unreduced gradients per micro step;
  // `structure`: print_struct, the modules' structure instead of their statistics.
  MonitorHookRows(MonitorMetrics metrics, bool per_micro_step, bool structure);
  // Every row's ops, eps and sums, made once from the config (the monitor's other rows use it too).
  const MonitorMetrics& metrics() const { return metrics_; }
  // grad_acc_steps: a module's calls are numbered 0 to micro_steps - 1, then again. Set before
  // any hook is registered.
  void set_micro_steps(int64_t micro_steps) { micro_steps_ = micro_steps < 1 ? 1 : micro_steps; }

  // Whether a tensor read for one slot is taken as it was for the next slot at the same version.
  // Not once the process has peers: an in-place collective (a tensor-parallel layer's
  // all_reduce of its output) writes its buffer and bumps no version counter. Any thread.
  void set_reuse_reads(bool on) { reuse_reads_.store(on, std::memory_order_relaxed); }

  // Whether the step under way is written: the hooks look only then.
  void set_collecting(bool on) { collecting_.store(on, std::memory_order_relaxed); }
  bool observing() const override {
    return structure_ || collecting_.load(std::memory_order_relaxed);
  }
  bool wants_output_kinds() const override { return structure_ != nullptr; }
  void forward_kind(const std::string& name, ObservedOutputKind kind) override;
  // print_struct's module_struct.json, the first time there is one to write; else "".
  std::string structure_file() { return structure_ ? structure_->take_file() : ""; }

  void forward(const std::string& name, ObservedTensors inputs, ObservedTensors outputs) override;
  void backward(const std::string& name, ObservedTensors input_grads,
                ObservedTensors output_grads) override;
  void called_from(const std::string& name, const std::string& source) override;
  // A watched parameter's gradient, just accumulated.
  void accumulated(const std::string& tag, const at::Tensor& grad);
  // `t`'s values, taken from this step's slots and accumulations where `t` was read at its
  // present version (grad_reduced: on one process, the optimizer steps with the very gradient
  // accumulated last).
  std::vector<MonitorValue> values(const at::Tensor& t);

  // msprobe's call ids: the order in which the step's tags came ("<tag>/<family>": the forward's
  // and the backward's slots, each accumulation, each optimizer moment), for its anomaly.json.
  void register_call(const std::string& name, const char* family);  // "<name><family>"
  int64_t call_id(const std::string& key) const;  // -1: it did not come
  void reset_calls();
  // Where module "<vpp>:<name>" was first called from; "" if it was not seen.
  std::string source_of(const std::string& module) const;

  // The step's end: `write(prefix, table)` for each table with rows, in msprobe's order (each
  // module's activations one write, in the order the modules were first called; then the
  // activations' gradients; then the unreduced gradients). The activations are then cleared;
  // the gradients are kept, as msprobe keeps them.
  template <typename Write>
  void take(Write&& write) {
    std::vector<std::pair<const char*, MonitorRowTable>> taken;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const std::string& module : module_order_) {
        MonitorRowTable& table = actv_[module];
        if (!table.empty()) taken.emplace_back("actv", table);  // a copy: the tags stay known
        table.clear();
      }
      read_.clear();
      if (!actv_grad_.empty()) taken.emplace_back("actv_grad", actv_grad_);
      if (!unreduced_.empty()) taken.emplace_back("grad_unreduced", unreduced_);
    }
    for (auto& [prefix, table] : taken) write(prefix, std::move(table));
  }

 private:
  // Each slot's row: "<name>.<side>:<micro>" for one slot, "<name>.<side>_<i>:<micro>" for several.
  void put_slots(MonitorRowTable& table, const std::string& family, const std::string& name,
                 const char* side, int64_t micro, const ObservedTensors& slots);
  // `t`'s values, read once a step however many slots it fills (mu_ held).
  std::vector<MonitorValue> values_locked(const at::Tensor& t);
  void register_call_locked(const std::string& key);
  int64_t next_micro(std::unordered_map<std::string, int64_t>& counters, const std::string& name);

  const MonitorMetrics metrics_;
  const bool per_micro_step_;
  const std::unique_ptr<MonitorStructure> structure_;  // print_struct only
  int64_t micro_steps_ = 1;
  std::atomic<bool> collecting_{false};
  std::atomic<bool> reuse_reads_{true};
  mutable std::mutex mu_;
  // Guarded by mu_:
  std::vector<std::string> module_order_;  // by first forward
  // Hashed, as MonitorRowTable's rows: each looked up for every call of the step.
  std::unordered_map<std::string, MonitorRowTable> actv_;
  std::unordered_map<std::string, int64_t> forward_micro_, backward_micro_, accumulated_micro_;
  MonitorRowTable actv_grad_, unreduced_;
  // The step's tensors read so far: 41-47 % of the forward's slots are a tensor another slot
  // had (a module's input is the module before's output, a block's output its last child's).
  TensorVersionMap<std::vector<MonitorValue>> read_;
  // Kept across steps, so that a step that registers the keys the last one did allocates
  // nothing: an id counts only if registered since the last reset_calls().
  struct CallId {
    int64_t id = -1;
    int64_t round = -1;
  };
  std::unordered_map<std::string, CallId> call_ids_;
  int64_t next_call_id_ = 0, calls_round_ = 0;
  std::string key_;  // the key being built, its capacity kept (guarded by mu_)
  std::map<std::string, std::string> sources_;
};

}  // namespace msprobe
