// What the tool reads for a tensor subclass it meets: the one plain tensor it holds (a DTensor's
// local shard). Reading the subclass itself would dispatch to Python, and for a DTensor would be
// a collective made inside a hook on one rank. A subclass holding no single plain tensor is
// recorded with null statistics and the reason (stats/readable.h).
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include <ATen/ATen.h>

#include <string>

namespace msprobe {

// The plain tensor that the tensor subclass `obj` holds: the one inner tensor of a traceable
// wrapper subclass (`__tensor_flatten__`: DTensor's `_local_tensor`), followed down through
// nested wrappers. Null where `obj` is no subclass or holds no single plain tensor. GIL required.
pybind11::object held_tensor_object(pybind11::handle obj);

// The same for a tensor met without its Python object (a gradient on an autograd thread): the
// GIL is taken only for a subclass. Undefined where there is none.
at::Tensor held_tensor(const at::Tensor& t);

}  // namespace msprobe
