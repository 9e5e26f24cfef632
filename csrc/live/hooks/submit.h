// The last step of every hook: store the call, and with task overflow_check judge it with its
// live tensors and raise the stop when it must.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
#include <string>

#include "core/selection.h"
#include "live/overflow/python_side.h"
#include "live/session/session.h"

namespace msprobe {

// Says once per session that statistics of a tensor of `call` could not be computed, if that
// happened while the hook described it.
void warn_statistics_failure(Session& session, const std::string& call);

// Who submits: a Python hook (GIL held; a stop raises pybind11::error_already_set), or a hook
// the autograd engine runs (no GIL; taken only to tell Python of an overflow, and a stop is thrown
// as torch's persisted python_error, so loss.backward() raises it with its own type).
enum class Caller { Python, AutogradEngine };

// Stores the call, or queues it under batched sync; with task overflow_check judges it with
// `live` (its tensors; empty otherwise) and does what the verdict says.
void submit(Session& session, StoredCall&& call, LiveTensors&& live,
            Caller caller = Caller::Python);

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
