// Module records (levels L0 and mix): a forward pre-hook and a forward hook per submodule, C++
// callables registered through nn.Module's own hook API. The forward hook also hooks the module's
// autograd nodes for its backward record (module_backward.h): no full backward hook, no node
// inserted into the user's graph.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

namespace msprobe {

// (pre_hook, forward_hook) for the module `Module.<qualname>.<class_name>`.
// With `record` false the hooks only keep track of the enclosing module (level L1 of task
// overflow_check, so that a stop names the module it happened in).
// `dumped`: the hooks of module_dump(), which record while every other hook is suspended.
pybind11::tuple make_module_hooks(const std::string& qualname, const std::string& class_name,
                                  bool record = true, bool dumped = false);

// (pre_hook, forward_hook) for a model given to start() under task overflow_check. The model is
// not recorded (msprobe records none); its call is tracked (started_model_calls()), and what it
// returns is judged: the damage rule's last line, where NaN/inf that no gradient carried is
// caught, and at L0 the only place a loss computed in its own forward is seen.
pybind11::tuple make_model_hooks(const std::string& class_name);

}  // namespace msprobe
