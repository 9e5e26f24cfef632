// Batched sync (overflow_check.sync): the calls waiting for their device statistics, in the order
// they were made. Thread-safe: its own lock guards the queue (the Python thread and the autograd
// engine's threads queue alike); it is never held while waiting for the GIL or a device.
#pragma once

#include <atomic>
#include <vector>

#include "core/config.h"
#include "core/guarded.h"
#include "live/session/step_state.h"
#include "live/stats/pending_stats.h"

namespace msprobe {

class DeferredCalls {
 public:
  // `pending`: the device statistics still being computed (null for CPU-only runs).
  DeferredCalls(const OverflowSection& options, const PendingStats* pending)
      : sync_(options.sync), batch_calls_(options.sync_batch_calls), pending_(pending) {}

  // Whether `call` must queue: behind calls already queued, for statistics still on the device,
  // or because every call is judged in batches.
  bool must_defer(const StoredCall& call) const;
  // Queues a call; true when it is time to judge the queue (sync "call", or a full batch).
  bool defer(DeferredCall&& call);
  bool any() const { return count_.load(std::memory_order_relaxed) != 0; }
  // A backward pass queued calls: their verdicts are wanted at its end, before an optimizer uses
  // the gradients. True once per pass (the caller asks the autograd engine for the flush).
  bool claim_backward_flush();
  // Every queued call, oldest first; the queue starts again empty.
  std::vector<DeferredCall> take();

 private:
  struct Queue {
    std::vector<DeferredCall> calls;
    bool backward_flush_queued = false;
  };
  const SyncMode sync_;
  const int64_t batch_calls_;
  const PendingStats* const pending_;
  Guarded<Queue> queue_{LockLevel::DeferredQueue};
  std::atomic<size_t> count_{0};  // the queue's length, read without its lock
};

}  // namespace msprobe
