// Whether a Python object is a torch.Tensor (or a subclass), the test every argument of every
// hooked call goes through. torch's THPVariable_Check is PyObject_IsInstance, which walks the
// metaclass's instance check even for an exact torch.Tensor or a plain int: the exact type is
// tested first, then the objects that are never tensors, and only the rest asks torch.
#pragma once

#include <Python.h>

#include <torch/csrc/autograd/python_variable.h>

namespace msprobe {

inline bool is_tensor(PyObject* obj) {
  PyTypeObject* type = Py_TYPE(obj);
  if (reinterpret_cast<PyObject*>(type) == THPVariableClass) return true;
  if (type == &PyLong_Type || type == &PyFloat_Type || type == &PyTuple_Type ||
      type == &PyList_Type || type == &PyBool_Type || type == &PyUnicode_Type || obj == Py_None) {
    return false;
  }
  return THPVariable_Check(obj);
}

}  // namespace msprobe
