// What free_benchmark asks of the Python objects a call takes and returns.
#pragma once

#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/python_variable.h>

namespace msprobe {

inline bool is_torch_tensor(const pybind11::handle& h) {
  return THPVariable_Check(h.ptr());
}

inline const at::Tensor& tensor_of(const pybind11::handle& h) {
  return THPVariable_Unpack(h.ptr());
}

inline bool is_py_sequence(const pybind11::handle& h) {
  return pybind11::isinstance<pybind11::list>(h) || pybind11::isinstance<pybind11::tuple>(h);
}

}  // namespace msprobe
