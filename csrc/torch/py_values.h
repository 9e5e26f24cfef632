// Turns the Python arguments and results of a call into dump entries (SPEC §3).
#pragma once

#include <Python.h>

#include <vector>

#include "core/record.h"

namespace msprobe {

// Tensors get their statistics; int/float/bool/str, dtype, device, Size, slice, Ellipsis get
// {"type", "value"}; None is null; tuples and lists become lists of entries. Anything else is
// recorded as null. Requires the GIL.
Entry describe_value(PyObject* obj);

// A call's outputs: a tuple or list result gives one entry per element, anything else one entry.
std::vector<Entry> describe_outputs(PyObject* result);

}  // namespace msprobe
