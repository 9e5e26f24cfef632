// Backward records of API calls: a post hook on the autograd node that produced the call's output
// sees the gradients flowing in (the node's inputs) and out (its outputs). The hook is C++ and
// runs without the GIL; it takes the GIL only when the overflow guard has something to tell
// Python, and a stop leaves loss.backward() as msprobe_cpp.OverflowError (thrown as torch's own
// persisted python_error, which the engine hands back to Python with its type).
#pragma once

#include <torch/csrc/autograd/function.h>

#include "live/hooks/node_ptr.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/selection.h"
#include "live/session/session.h"

namespace msprobe {

// Describes the gradients flowing into (`grads_in`) and out of (`grads_out`) a backward call
// named by `call` (backward_call()), then stores and judges it as any call: from an autograd hook,
// without the GIL, which it takes only to tell Python of an overflow (a stop is thrown as torch's
// persisted python_error, so loss.backward() raises it with its own type).
void record_backward(Session& s, StoredCall&& call, const torch::autograd::variable_list& grads_in,
                     const torch::autograd::variable_list& grads_out);

// Records `<name>` (a ".backward" call name) in `session` when `node` runs. The hook holds the
// session weakly: a graph that outlives its session records nothing.
void add_backward_recorder(const NodePtr& node, const std::shared_ptr<Session>& session,
                           std::string name, StackPtr stack, Selected parts,
                           std::optional<std::string> module, uint64_t epoch);

// Calls `on_gradient(grad)` with the gradient of `output` when autograd runs the node that made it:
// the recorder's own post hook, so every task sees a backward call the same way (without the GIL,
// which `on_gradient` takes if it needs it; the gradients flow on unchanged). False when no node
// made `output` (a leaf): there is no backward call to see.
bool add_gradient_callback(const at::Tensor& output,
                           std::function<void(const at::Tensor& grad)> on_gradient);

}  // namespace msprobe
