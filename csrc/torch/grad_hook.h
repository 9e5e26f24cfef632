// Backward records of API calls: a post hook on the autograd node that produced the call's output
// sees the gradients flowing in (the node's inputs) and out (its outputs). The hook is C++ and
// runs without the GIL; it takes the GIL only when the overflow guard has something to tell
// Python, and a stop leaves loss.backward() as msprobe_cpp.OverflowError (thrown as torch's own
// persisted python_error, which the engine hands back to Python with its type).
#pragma once

#include <torch/csrc/autograd/function.h>

#include <memory>
#include <optional>
#include <string>

#include "core/selection.h"
#include "torch/session.h"

namespace msprobe {

// Records `<name>` (a ".backward" call name) in `session` when `node` runs. The hook holds the
// session weakly: a graph that outlives its session records nothing.
void add_backward_recorder(const std::shared_ptr<torch::autograd::Node>& node,
                           const std::shared_ptr<Session>& session, std::string name,
                           StackPtr stack, Selected parts, std::optional<std::string> module);

}  // namespace msprobe
