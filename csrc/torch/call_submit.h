// The last step of every hook: store the call, and with task overflow_check judge it with its
// live tensors and raise the stop when it must.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
#include <string>

#include "core/selection.h"
#include "torch/overflow_raise.h"
#include "torch/session.h"

namespace msprobe {

// Says once per session that statistics of a tensor of `call` could not be computed, if that
// happened while the hook described it.
void warn_statistics_failure(Session& session, const std::string& call);

// Judges the queued calls (Session::resolve_deferred) and does what their verdicts say: notices
// first, then the first stop, raised here. GIL required.
void flush_deferred(Session& session);

// `make_live()` builds the call's LiveTensors; it runs only when the session watches for
// overflows. GIL required when it does (a stop raises a Python exception).
template <typename MakeLive>
void submit(Session& session, StoredCall&& call, MakeLive&& make_live) {
  warn_statistics_failure(session, call.record.name);
  if (session.must_defer(call)) {
    // Batched sync: judged when its batch comes back (at once under sync "call").
    LiveTensors live = session.watching() ? make_live() : LiveTensors{};
    if (session.defer(std::move(call), std::move(live))) flush_deferred(session);
    return;
  }
  if (!session.watching()) {
    session.add(std::move(call));
    return;
  }
  const LiveTensors live = make_live();
  if (auto event = session.add(std::move(call), &live)) handle_overflow_event(session, *event);
}

// A backward record without its entries: named, marked as using msprobe's `input` key, with the
// parts data_mode keeps, the forward's stack and module.
StoredCall backward_call(const std::string& name, Selected parts, StackPtr stack,
                         std::optional<std::string> module_hint);

// A backward record: `grads_in` flow into the call (its `input`), `grads_out` flow out of it
// (its `output`); either may be a tuple of tensors and None, or one value. Submitted as above.
void submit_backward(Session& session, const std::string& name, pybind11::handle grads_in,
                     pybind11::handle grads_out, Selected parts, StackPtr stack,
                     std::optional<std::string> module_hint);

}  // namespace msprobe
