// Batched sync (overflow_check.sync): calls queued until their device statistics come back, then
// stored and judged in the order they were made.
#include "live/session/deferred_calls.h"

#include "live/session/session.h"

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

std::vector<OverflowEvent> Session::resolve_deferred() {
  std::vector<DeferredCall> batch = deferred_.take();
  std::vector<OverflowEvent> events;
  if (batch.empty()) return events;
  PendingStats* slots = capture_.pending();
  if (slots) slots->resolve();  // the one host sync of the batch
  bool raising = false;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (slots) {
      for_each_entry(batch[i].call.record, [&](Entry& e) {
        if (e.pending_stats >= 0) slots->fill(e);
      });
    }
    std::optional<OverflowEvent> event = add(std::move(batch[i].call), &batch[i].live);
    if (!event) continue;
    if (event->raise && !raising) {
      raising = true;
      raising_call_arguments() = std::move(batch[i].held);  // for its replay (python_side)
      const auto later = static_cast<int64_t>(batch.size() - 1 - i);
      event->facts.raised_calls_later = later;
      state_.with_lock([&](StepState& s) {
        if (s.decisions) s.decisions->set_raised_calls_later(event->facts.finding.call, later);
      });
    }
    events.push_back(std::move(*event));
  }
  return events;
}

}  // namespace msprobe
