// Statistics launched on the device and read back later, many calls' at once: with batched sync
// a step does not wait for the device at every hooked call, only once per batch.
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "core/record.h"
#include "live/stats/device_stats.h"
#include "live/stats/nonfinite_facts.h"

namespace msprobe {

class PendingStats {
 public:
  // Launches `t`'s reductions; returns the slot resolve() fills. `t` is held until then, for the
  // rare second pass (overflowed accumulation, Max/Min_except of anomalous tensors), and let go
  // there. Thread-safe: backward recorders run on the engine's threads.
  int32_t add(const at::Tensor& t);

  // Copies every launched result to the host at once (one host sync) and computes the
  // summaries; then fill() gives them out.
  void resolve();
  // Writes slot `e.pending_stats`'s statistics into `e` and marks it final. A slot can fill
  // several entries (the statistics cache hands the same one to every read of a tensor).
  void fill(Entry& e) const;
  // Forgets every slot: at a step's end, when none is pending any more.
  void clear();
  // No slot this step: then no entry can be waiting for one. Read without the lock, by every hook.
  bool empty() const { return slots_.load(std::memory_order_relaxed) == 0; }

 private:
  mutable std::mutex mu_;
  std::atomic<size_t> slots_{0};     // results_.size()
  std::vector<at::Tensor> results_;  // per slot: max, min, sum, norm on the tensor's device
  std::vector<at::Tensor> tensors_;
  struct Resolved {
    DeviceSummary summary;
    NonFiniteFacts facts;  // where max/min are not finite
  };
  std::vector<Resolved> resolved_;
};

}  // namespace msprobe
