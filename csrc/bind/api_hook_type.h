// _C.ApiHook, the callable that replaces each torch API: a plain CPython type, not a pybind11
// class, because every hooked torch call goes through it. CPython hands its tp_call the argument
// tuple (and dict, if any) it builds for any callable; a pybind11 class would add, per call, the
// lookup of `__call__`, a bound method, its dispatcher's overload loop and argument casters.
#pragma once

#include <pybind11/pybind11.h>

namespace msprobe {

// Adds ApiHook(api: str, original) with read-only `api` and `original` to `m`.
void add_api_hook_type(pybind11::module_& m);

}  // namespace msprobe
