#include "live/capture/held_data.h"

#include <torch/csrc/autograd/python_variable.h>

#include "live/capture/is_tensor.h"
#include "live/crossing/python_crossing.h"

namespace py = pybind11;

namespace msprobe {

namespace {

constexpr int kMaxWrappers = 4;  // a wrapper of a wrapper of ...: deeper is null, not a recursion

bool is_subclass(const at::Tensor& t) {
  return t.unsafeGetTensorImpl()->is_python_dispatch();
}

// The single inner tensor attribute named by __tensor_flatten__, or null.
py::object flattened_inner(py::handle obj) {
  const py::object flat =
      PythonCrossing::owned(PyObject_CallMethod(obj.ptr(), "__tensor_flatten__", nullptr));
  if (!flat) {
    PythonCrossing::drop_error();
    return py::object();
  }
  if (!PyTuple_Check(flat.ptr()) || PyTuple_GET_SIZE(flat.ptr()) < 1) return py::object();
  const py::handle names = PyTuple_GET_ITEM(flat.ptr(), 0);
  if (!PySequence_Check(names.ptr()) || PySequence_Size(names.ptr()) != 1) {
    PythonCrossing::drop_error();
    return py::object();
  }
  const py::object name = PythonCrossing::owned(PySequence_GetItem(names.ptr(), 0));
  if (!name || !PyUnicode_Check(name.ptr())) {
    PythonCrossing::drop_error();
    return py::object();
  }
  py::object inner = PythonCrossing::owned(PyObject_GetAttr(obj.ptr(), name.ptr()));
  if (!inner) PythonCrossing::drop_error();
  return inner;
}

}  // namespace

py::object held_tensor_object(py::handle obj) {
  PythonCrossing::assert_gil();
  if (!is_tensor(obj)) return py::object();
  py::handle at = obj;
  py::object keep;
  for (int depth = 0; depth < kMaxWrappers; ++depth) {
    if (!is_subclass(tensor_of(at))) return depth == 0 ? py::object() : keep;
    py::object inner = flattened_inner(at);
    if (!inner) {
      // A DTensor of a torch without __tensor_flatten__ still names its shard.
      inner = PythonCrossing::owned(PyObject_GetAttrString(at.ptr(), "_local_tensor"));
      if (!inner) PythonCrossing::drop_error();
    }
    if (!inner || !is_tensor(inner) || inner.is(at)) return py::object();
    keep = std::move(inner);
    at = keep;
  }
  return py::object();
}

at::Tensor held_tensor(const at::Tensor& t) {
  if (!t.defined() || !is_subclass(t)) return at::Tensor();
  if (!Py_IsInitialized()) return at::Tensor();
  PythonCrossing::Gil gil;
  const py::object obj = PythonCrossing::owned(THPVariable_Wrap(t));
  if (!obj) {
    PythonCrossing::drop_error();
    return at::Tensor();
  }
  const py::object inner = held_tensor_object(obj);
  return inner ? tensor_of(inner) : at::Tensor();
}

}  // namespace msprobe
