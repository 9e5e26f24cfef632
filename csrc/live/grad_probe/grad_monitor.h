// Task grad_probe (msprobe 1.1.1's GradientMonitor): before each optimizer step, a summary row
// of each watched parameter's gradient (grad_summary_<step>.csv) and, at L1 and L2, its direction
// (step<N>/<name>.npy). A thread of its own reads the gradients (one read-back per device, not
// one sync per statistic per parameter) while the optimizer step runs, which only reads them
// too; the step waits at its end until they are read (step_done()), and another thread writes
// the files while training goes on. An optimizer that writes into the gradients during its step
// (fused, maximize) gets them copied first instead.
#pragma once

#include <torch/types.h>

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "live/session/task_processor.h"
#include "live/session/write_thread.h"

namespace msprobe {

// A gradient to summarize; `grad` undefined where the parameter has none (said, and skipped).
// A DTensor's (FSDP2) is this rank's shard: `global_shape` and `placements` then say of what.
struct NamedGrad {
  std::string name;
  at::Tensor grad;
  std::vector<int64_t> global_shape;
  std::string placements;  // "" for a whole gradient
};

// The task's processor (registered in task_registry.cpp); its step and rank rule is the one every
// task's is (core/step_rank_gate.h).
class GradMonitor final : public TaskProcessor {
 public:
  explicit GradMonitor(const TaskParts& parts);
  ~GradMonitor();  // every step handed over is written first

  // grad_probe.param_list.
  bool watches(const std::string& name) const { return section_.watches(name); }
  // Whether rank `rank` is one the config's rank list names (-1: not distributed, always).
  bool writes_rank(int rank) const;
  // An optimizer is about to step: counts it (msprobe counts every optimizer's step) and returns
  // whether the config's step list names it.
  bool next_step();
  int64_t step() const { return step_; }
  // The summary of this step's gradients, handed to the read thread. `rank` -1 writes rank0, as
  // msprobe does outside torch.distributed. `optimizer_writes`: the optimizer is known to write
  // into the gradients in its step: they are copied here.
  void summarize(int rank, const std::vector<NamedGrad>& grads, bool optimizer_writes);
  // The optimizer step is over: returns once this step's gradients are read (the program may
  // write into them from here on). Call without the GIL.
  void step_done();
  // Returns once every summary handed over is on disk; says the writes that failed.
  void drain();

 private:
  void say_failures();
  void failed(const std::string& why);

  const GradProbeSection section_;
  const std::string dump_path_;
  const StepRankGate steps_ranks_;
  int64_t step_ = -1;
  std::mutex failed_mu_;
  std::vector<std::string> failed_;  // the threads' errors, said by the training thread
  // The gradients read in place during the step, with their versions when it began: an optimizer
  // that wrote into them is found at step_done(), and they are copied from then on.
  std::vector<NamedGrad> in_place_;
  std::vector<int64_t> versions_;
  bool copy_always_ = false;
  WriteThread writes_;
  WriteThread reads_;  // last: its jobs post to writes_
};

}  // namespace msprobe
