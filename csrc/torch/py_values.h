// Turns the Python arguments and results of a call into dump entries (docs/formats.md).
#pragma once

#include <Python.h>

#include <vector>

#include "core/record.h"
#include "torch/describe_options.h"

namespace msprobe {

// Tensors get their statistics; int/float/bool/str, dtype, device, Size, slice, Ellipsis get
// {"type", "value"}; None is null; tuples and lists become lists of entries. Anything else is
// recorded as null. Requires the GIL. `stem` names saved tensors: "<call>.input.0", and list
// items append ".<i>".
Entry describe_value(PyObject* obj, const DescribeOptions& options = {},
                     const std::string& stem = "");

// A sequence of values (a call's positional arguments, a tuple result): one entry per element,
// element i named "<stem>.<i>"; a single value gives one entry named "<stem>.0".
std::vector<Entry> describe_items(PyObject* seq, const DescribeOptions& options,
                                  const std::string& stem);

}  // namespace msprobe
