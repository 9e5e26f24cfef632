// Backward records of API calls: a hook on the autograd node that produced the call's output sees
// the gradients flowing in (the node's inputs) and out (its outputs). It is registered through
// the node's Python API so that an overflow stop raised in it leaves loss.backward() as
// msprobe_cpp.OverflowError (a C++ hook's exception would arrive as a plain RuntimeError).
#pragma once

#include <torch/csrc/autograd/function.h>

#include <memory>
#include <optional>
#include <string>

#include "core/selection.h"
#include "torch/session.h"

namespace msprobe {

// Records `<name>` (a ".backward" call name) in `session` when `node` runs. The hook holds the
// session weakly: a graph that outlives its session records nothing. GIL required.
void add_backward_recorder(const std::shared_ptr<torch::autograd::Node>& node,
                           const std::shared_ptr<Session>& session, std::string name,
                           StackPtr stack, Selected parts, std::optional<std::string> module);

}  // namespace msprobe
