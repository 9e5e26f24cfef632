// Module records (levels L0 and mix): forward pre/post hooks and a full backward hook per
// submodule, each a C++ callable registered through nn.Module's own hook API.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

namespace msprobe {

// (pre_hook, forward_hook, backward_hook) for the module `Module.<qualname>.<class_name>`.
// With `record` false the hooks only keep track of the enclosing module (level L1 of task
// overflow_check, so that a stop names the module it happened in).
pybind11::tuple make_module_hooks(const std::string& qualname, const std::string& class_name,
                                  bool record = true);

}  // namespace msprobe
