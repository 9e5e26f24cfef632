// msprobe_cpp._C, bound by concept: each part binds its own names, and module.cpp puts them
// together. GIL: every bound function is called from Python with the GIL held; those that run
// long without Python (a check, a write) release it themselves.
#pragma once

#include <pybind11/pybind11.h>

namespace msprobe {

void bind_session(pybind11::module_& m);  // _C.Session: one debugger's engine
void bind_hooks(pybind11::module_& m);    // the API and module hooks, and what Python asks of them
void bind_tools(pybind11::module_& m);    // the logger's sink, the command line, the wrap list
void bind_for_tests(pybind11::module_& m);  // tests' and benches' hooks (a leading underscore)
void bind_tasks(pybind11::module_& m);      // grad_probe (and free_benchmark)

}  // namespace msprobe
