// msprobe 26.x's module parameters (docs/formats.md, "msprobe 1.1.x and 26.x files"): a module
// forward record's "parameters", and the "<module>.parameters_grad.<k>" records of their
// gradients, taken where autograd accumulates each parameter's gradient.
#pragma once

#include <pybind11/pybind11.h>

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/record.h"

namespace msprobe {

class Session;

// The module's own parameters (not its submodules'), by name in registration order, as entries
// of its forward call `call`. GIL required.
std::vector<std::pair<std::string, Entry>> parameter_entries(Session& s,
                                                             pybind11::handle module,
                                                             const std::string& call);

// Hooks the gradient accumulation of each of the module's own parameters that requires grad
// (once per autograd node: a module called twice in a step accumulates once), so that its
// gradient is recorded in `<module_key>.parameters_grad.<k>`. GIL required.
void hook_parameter_grads(const std::shared_ptr<Session>& s, pybind11::handle module,
                          const std::string& module_key);

// Calls `after(param)` each time autograd has accumulated `param`'s gradient into param.grad,
// on the thread that runs that part of the backward, for as long as the returned token lives.
// The token keeps the parameter's accumulator node alive, so that one hook serves every step
// (the training monitor's unreduced gradients, msprobe's AccumulateGrad hook). Called with the
// GIL; `after` runs without it.
std::shared_ptr<void> on_accumulated_grad(const at::Tensor& param,
                                          std::function<void(const at::Tensor&)> after);

}  // namespace msprobe
