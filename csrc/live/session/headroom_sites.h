// The live side of the headroom warnings (core/headroom.h): which call site a stored call is, what
// its 16-bit outputs tell the Headroom, and (Session::say_headroom) the one line said for a site.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/headroom.h"
#include "live/capture/call_stack.h"
#include "live/session/step_state.h"

namespace msprobe {

// "Tensor.__mul__.3.forward" at `stack` -> the site {"Tensor.__mul__", the stack's identity}.
HeadroomSite headroom_site(const std::string& name, const StackPtr& stack);

// The float16/bfloat16 outputs of an API forward call, told to `headroom`; the site's record when
// it just reached the threshold. Under the step lock.
std::optional<HeadroomRecord> observe_headroom(Headroom& headroom, const StoredCall& call,
                                               int64_t step);

}  // namespace msprobe
