// msprobe 26.x's level debug: PrecisionDebugger.save(variable, name, save_backward) records a
// value of the user's choosing, and its gradients, in the step's debug.json (docs/formats.md).
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>

namespace msprobe {

class Session;

// Records `variable` (a tensor, int, float, str, or lists, tuples and dicts of them) as
// "<name>.<n>.debug", n counting the saves of `name` in the step; with `save_backward`, the
// gradients of its tensors that require grad fill "<name>_grad.<n>.debug" as they arrive. Does
// nothing outside level debug and tasks statistics and tensor, or in a step that the config's
// step or rank list leaves out; a variable of another type is skipped with a warning, as 26.x
// does. `rank`: -1 outside torch.distributed. GIL required.
void save_debug_value(const std::shared_ptr<Session>& session, pybind11::handle variable,
                      pybind11::handle name, pybind11::handle save_backward, int rank);

}  // namespace msprobe
