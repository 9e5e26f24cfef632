// Batched sync (overflow_check.sync): calls queued until their device statistics come back, then
// stored and judged in the order they were made.
#include "live/session/deferred_calls.h"

namespace msprobe {

bool DeferredCalls::must_defer(const StoredCall& call) const {
  if (sync_ == SyncMode::Batch) return true;
  if (any()) return true;
  bool pending = false;
  // CPU-only runs never launch device statistics: their hooks skip the walk.
  if (pending_ && !pending_->empty()) {
    for_each_entry(call.record, [&](const Entry& e) { pending = pending || e.pending_stats >= 0; });
  }
  return pending;
}

bool DeferredCalls::defer(DeferredCall&& call) {
  return queue_.with_lock([&](Queue& q) {
    q.calls.push_back(std::move(call));
    count_.store(q.calls.size(), std::memory_order_relaxed);
    return sync_ == SyncMode::Call || static_cast<int64_t>(q.calls.size()) >= batch_calls_;
  });
}

bool DeferredCalls::claim_backward_flush() {
  return queue_.with_lock([](Queue& q) { return !std::exchange(q.backward_flush_queued, true); });
}

std::vector<DeferredCall> DeferredCalls::take() {
  std::vector<DeferredCall> out;
  queue_.with_lock([&](Queue& q) {
    out.swap(q.calls);
    count_.store(0, std::memory_order_relaxed);
    q.backward_flush_queued = false;
  });
  return out;
}

}  // namespace msprobe
