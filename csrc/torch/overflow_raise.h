// The stop itself: write the flagged step, remove every hook, raise msprobe_cpp.OverflowError out
// of the hooked call.
#pragma once

#include "torch/session.h"

namespace msprobe {

// Never returns: throws pybind11::error_already_set with msprobe_cpp.OverflowError set.
// GIL required.
[[noreturn]] void raise_overflow(Session& session, const OverflowStop& stop);

}  // namespace msprobe
