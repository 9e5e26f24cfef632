// Backward records of API calls: a post hook on the autograd node that produced the call's
// output sees the gradients flowing in (the node's inputs) and out (its outputs).
#pragma once

#include <torch/csrc/autograd/function.h>

#include <memory>
#include <string>

#include "torch/session.h"

namespace msprobe {

// Adds a post hook to `node` that records `<name>` (a ".backward" call name) in `session`.
// The hook holds the session weakly: a graph that outlives its session records nothing.
// `parts` says which sides data_mode keeps.
void add_backward_recorder(torch::autograd::Node& node, const std::shared_ptr<Session>& session,
                           std::string name, StackPtr stack, Selected parts);

}  // namespace msprobe
