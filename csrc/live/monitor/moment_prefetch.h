// mv_distribution's statistics read ahead. The moments an optimizer's step leaves are the ones
// the next written step's before_step reads, and a training step does not touch them between
// two optimizer steps: their statistics are read on a thread of their own while the next step's
// forward and backward run, on a core a one-thread training leaves idle (a model whose step is
// mostly its parameters' work spent a third of the monitor's time reading its moments). A
// moment changed since it was read (its tensor replaced, as load_state_dict does, or written in
// place: its version moved) is read again at the step, so the values are always the step's.
// Plain CPU tensors only: a device's reductions are queued on its stream, not on this thread,
// and a tensor subclass's (DTensor's) ops run in Python, under the GIL.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/monitor_csv.h"
#include "live/monitor/monitor_stats.h"
#include "live/monitor/step_parameter.h"
#include "live/session/write_thread.h"

namespace msprobe {

class MomentPrefetch {
 public:
  explicit MomentPrefetch(MonitorMetrics metrics) : metrics_(std::move(metrics)) {}
  ~MomentPrefetch() { forget(); }

  // After an optimizer step whose next step is written: reads each parameter's moments.
  void read_ahead(const std::vector<StepParameter>& params);
  // `t`'s values read ahead, when `t` is still the tensor read, unchanged; else nullopt.
  std::optional<std::vector<MonitorValue>> take(const at::Tensor& t);
  // Waits for the reads, then lets their tensors go.
  void forget();

 private:
  struct Read {
    at::Tensor tensor;  // held: its TensorImpl cannot be another tensor's while this is kept
    int64_t version = 0;
    std::vector<MonitorValue> values;  // written by the thread; empty if its read failed
  };
  void add(const at::Tensor& t);
  void finish();

  const MonitorMetrics metrics_;
  std::vector<Read> reads_;  // the thread's while a read is pending
  std::unordered_map<const void*, size_t> index_;  // by TensorImpl
  bool pending_ = false;
  WriteThread thread_;  // last: its destructor finishes the read first
};

}  // namespace msprobe
