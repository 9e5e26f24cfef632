// Batched sync: the queued calls judged once their statistics are back.
#pragma once

#include <vector>

#include "core/overflow_decisions.h"
#include "live/session/session.h"

namespace msprobe {

// Reads every queued call's device statistics back at once, then stores and judges the calls in
// the order they were made, as Session::add would have one by one. Returns what the hooks must
// do; a raise carries how many calls ran after its call.
std::vector<OverflowEvent> resolve_deferred(Session& session);

}  // namespace msprobe
