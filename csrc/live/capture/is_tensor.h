// Whether a Python object is a torch.Tensor (or a subclass), the test every argument of every
// hooked call goes through. torch's THPVariable_Check is PyObject_IsInstance, which walks the
// metaclass's instance check even for an exact torch.Tensor or a plain int: the exact type is
// tested first, then the objects that are never tensors, and only the rest asks torch. Every
// task's processor asks it here (the dump's capture and free_benchmark's reruns alike).
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include <torch/csrc/autograd/python_variable.h>

namespace msprobe {

inline bool is_tensor(pybind11::handle obj) {
  const PyTypeObject* type = Py_TYPE(obj.ptr());
  if (static_cast<const void*>(type) == THPVariableClass) return true;
  if (type == &PyLong_Type || type == &PyFloat_Type || type == &PyTuple_Type ||
      type == &PyList_Type || type == &PyBool_Type || type == &PyUnicode_Type || obj.is_none()) {
    return false;
  }
  return THPVariable_Check(obj.ptr());
}

// The tensor of an object is_tensor() said is one.
inline const at::Tensor& tensor_of(const pybind11::handle& h) {
  return THPVariable_Unpack(h.ptr());
}

inline bool is_py_sequence(const pybind11::handle& h) {
  return PyList_Check(h.ptr()) || PyTuple_Check(h.ptr());
}

}  // namespace msprobe
