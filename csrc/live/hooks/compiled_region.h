// torch.compile's run time calls torch eagerly too: the buffers inductor's generated code
// allocates, AOTAutograd's backward. Those calls belong to a compiled region, which the tool leaves
// alone (neither recorded nor judged), so a hooked API hands them straight to the original. They
// are told by the file of the calling Python frame, and only once a compiled model was started:
// before that, the check is one relaxed load.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

namespace msprobe {

// From now on, a caller whose file starts with one of `prefixes` or contains one of `fragments`
// is a compiled region's run time. GIL required (it is what guards the lists).
void watch_compiled_runtime(std::vector<std::string> prefixes, std::vector<std::string> fragments);

// Whether code of `file` is a compiled region's run time (once watch_compiled_runtime was
// called): the one test of it, for the hooks and for Python's compile-aware wrappers.
bool compiled_runtime_file(const std::string& file);

// torch.compile is at work (torch 2.x): torch.compiler's `_is_compiling_flag`, which it holds
// True while it traces and compiles, when eager code it runs (fake-tensor propagation, AOTAutograd)
// calls torch. `globals`: that module's dict, kept for good. GIL required.
void watch_compiling_flag(pybind11::handle globals, pybind11::handle name);

// Whether the current hooked call belongs to torch.compile: made while it compiles, or by a
// compiled region's run time (the Python frame that called the hook). The GIL must be held.
bool called_by_compiled_region();

}  // namespace msprobe
