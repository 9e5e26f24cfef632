#include "live/session/resolve_deferred.h"

#include "live/crossing/python_crossing.h"
#include "live/overflow/call_arguments.h"

namespace msprobe {

std::vector<OverflowEvent> resolve_deferred(Session& session) {
  std::vector<DeferredCall> batch = session.deferred().take();
  std::vector<OverflowEvent> events;
  if (batch.empty()) return events;
  PendingStats* slots = session.hooks().capture.pending();
  if (slots) {
    PythonCrossing::WithoutGil no_gil;  // no thread waits on the GIL for a device
    slots->resolve();                   // the one host sync of the batch
  }
  bool raising = false;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (slots) {
      for_each_entry(batch[i].call.record, [&](Entry& e) {
        if (e.pending_stats >= 0) slots->fill(e);
      });
    }
    std::optional<OverflowEvent> event = session.add(std::move(batch[i].call), &batch[i].live);
    if (!event) continue;
    if (event->raise && !raising) {
      raising = true;
      raising_call_arguments() = std::move(batch[i].held);  // for its replay (python_side)
      const auto later = static_cast<int64_t>(batch.size() - 1 - i);
      event->facts.raised_calls_later = later;
      session.guard().set_raised_calls_later(event->facts.finding.call, later);
    }
    events.push_back(std::move(*event));
  }
  return events;
}

}  // namespace msprobe
