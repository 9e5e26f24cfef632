// Task grad_probe (msprobe 1.1.1's GradientMonitor): before each optimizer step, a summary row
// of each watched parameter's gradient (grad_summary_<step>.csv) and, at L1 and L2, its direction
// (step<N>/<name>.npy). The training step copies the watched gradients; a thread of its own
// computes their statistics (one read-back per device, not one sync per statistic per
// parameter) and writes the files while training goes on. Memory: the copies of at most two
// steps' gradients wait for it.
#pragma once

#include <torch/types.h>

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
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

class GradMonitor {
 public:
  explicit GradMonitor(const Config& config);
  ~GradMonitor();  // every step handed over is written first

  // grad_probe.param_list.
  bool watches(const std::string& name) const { return section_.watches(name); }
  // Whether rank `rank` is one the config's rank list names (-1: not distributed, always).
  bool writes_rank(int rank) const;
  // An optimizer is about to step: counts it (msprobe counts every optimizer's step) and returns
  // whether the config's step list names it.
  bool next_step();
  int64_t step() const { return step_; }
  // The summary of this step's gradients, handed to the write thread. `rank` -1 writes rank0, as
  // msprobe does outside torch.distributed.
  void summarize(int rank, const std::vector<NamedGrad>& grads);
  // Returns once every summary handed over is on disk; says the writes that failed.
  void drain();

 private:
  void say_failures();

  const GradProbeSection section_;
  const std::string dump_path_;
  const RangeList steps_, ranks_;
  int64_t step_ = -1;
  std::mutex failed_mu_;
  std::vector<std::string> failed_;  // the write thread's errors, said by the training thread
  WriteThread writes_;               // last: its jobs use the members above
};

}  // namespace msprobe
