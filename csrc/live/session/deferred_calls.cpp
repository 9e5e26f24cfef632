// Batched sync (overflow_check.sync): calls queued until their device statistics come back, then
// stored and judged in the order they were made.
#include "live/session/session.h"

namespace msprobe {

bool Session::must_defer(const StoredCall& call) const {
  if (config_.overflow_check.sync == SyncMode::Batch) return true;
  if (has_deferred()) return true;
  bool pending = false;
  // CPU-only runs never launch device statistics: their hooks skip the walk.
  const PendingStats* slots = capture_.options().pending;
  if (slots && !slots->empty()) {
    for_each_entry(call.record, [&](const Entry& e) { pending = pending || e.pending_stats >= 0; });
  }
  return pending;
}

bool Session::defer(StoredCall&& call, LiveTensors&& live, std::shared_ptr<HeldArguments> held) {
  return state_.with_lock([&](StepState& s) {
    s.deferred.push_back(DeferredCall{std::move(call), std::move(live), std::move(held)});
    deferred_count_.store(s.deferred.size(), std::memory_order_relaxed);
    return config_.overflow_check.sync == SyncMode::Call ||
           static_cast<int64_t>(s.deferred.size()) >= config_.overflow_check.sync_batch_calls;
  });
}

bool Session::claim_backward_flush() {
  if (!watching()) return false;
  return state_.with_lock(
      [](StepState& s) { return !std::exchange(s.backward_flush_queued, true); });
}

std::vector<OverflowEvent> Session::resolve_deferred() {
  std::vector<DeferredCall> batch;
  state_.with_lock([&](StepState& s) {
    batch.swap(s.deferred);
    deferred_count_.store(0, std::memory_order_relaxed);
    s.backward_flush_queued = false;
  });
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
