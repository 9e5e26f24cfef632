// Batched sync (overflow_check.sync): calls queued until their device statistics come back, then
// stored and judged in the order they were made.
#include "torch/session.h"

namespace msprobe {

bool Session::must_defer(const StoredCall& call) {
  if (config_.overflow_check.sync == SyncMode::Batch) return true;
  bool pending = false;
  // CPU-only runs never launch device statistics: their hooks skip the walk.
  if (options_.pending && !pending_stats_.empty()) {
    for_each_entry(call.record, [&](const Entry& e) { pending = pending || e.pending_stats >= 0; });
  }
  return pending || has_deferred();
}

bool Session::defer(StoredCall&& call, LiveTensors&& live) {
  std::lock_guard<std::mutex> lock(deferred_mu_);
  deferred_.push_back(DeferredCall{std::move(call), std::move(live)});
  deferred_count_.store(deferred_.size(), std::memory_order_relaxed);
  return config_.overflow_check.sync == SyncMode::Call ||
         static_cast<int64_t>(deferred_.size()) >= config_.overflow_check.sync_batch_calls;
}

bool Session::has_deferred() const {
  return deferred_count_.load(std::memory_order_relaxed) != 0;
}

bool Session::claim_backward_flush() {
  std::lock_guard<std::mutex> lock(deferred_mu_);
  if (backward_flush_queued_ || !watch_) return false;
  backward_flush_queued_ = true;
  return true;
}

std::vector<OverflowEvent> Session::resolve_deferred() {
  std::vector<DeferredCall> batch;
  {
    std::lock_guard<std::mutex> lock(deferred_mu_);
    batch.swap(deferred_);
    deferred_count_.store(0, std::memory_order_relaxed);
    backward_flush_queued_ = false;
  }
  std::vector<OverflowEvent> events;
  if (batch.empty()) return events;
  pending_stats_.resolve();
  bool raising = false;
  for (size_t i = 0; i < batch.size(); ++i) {
    for_each_entry(batch[i].call.record, [&](Entry& e) {
      if (e.pending_stats >= 0) pending_stats_.fill(e);
    });
    std::optional<OverflowEvent> event = add(std::move(batch[i].call), &batch[i].live);
    if (!event) continue;
    if (event->raise && !raising) {
      raising = true;
      const auto later = static_cast<int64_t>(batch.size() - 1 - i);
      event->facts.raised_calls_later = later;
      std::lock_guard<std::mutex> lock(mu_);
      for (auto* stored : {&step_overflow_, &pending_backward_, &reached_gradients_}) {
        if (*stored && (*stored)->finding.call == event->facts.finding.call) {
          (*stored)->raised_calls_later = later;
        }
      }
    }
    events.push_back(std::move(*event));
  }
  return events;
}

}  // namespace msprobe
