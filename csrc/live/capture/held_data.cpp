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
py::object flattened_inner(PyObject* obj) {
  PyObject* flat = PyObject_CallMethod(obj, "__tensor_flatten__", nullptr);
  if (!flat) {
    PythonCrossing::drop_error();
    return py::object();
  }
  py::object owned = py::reinterpret_steal<py::object>(flat);
  if (!PyTuple_Check(flat) || PyTuple_GET_SIZE(flat) < 1) return py::object();
  PyObject* names = PyTuple_GET_ITEM(flat, 0);
  if (!PySequence_Check(names) || PySequence_Size(names) != 1) {
    PythonCrossing::drop_error();
    return py::object();
  }
  py::object name = py::reinterpret_steal<py::object>(PySequence_GetItem(names, 0));
  if (!name || !PyUnicode_Check(name.ptr())) {
    PythonCrossing::drop_error();
    return py::object();
  }
  PyObject* inner = PyObject_GetAttr(obj, name.ptr());
  if (!inner) PythonCrossing::drop_error();
  return py::reinterpret_steal<py::object>(inner);
}

}  // namespace

py::object held_tensor_object(PyObject* obj) {
  PythonCrossing::assert_gil();
  if (!is_tensor(obj)) return py::object();
  PyObject* at = obj;
  py::object keep;
  for (int depth = 0; depth < kMaxWrappers; ++depth) {
    if (!is_subclass(THPVariable_Unpack(at))) return depth == 0 ? py::object() : keep;
    py::object inner = flattened_inner(at);
    if (!inner) {
      // A DTensor of a torch without __tensor_flatten__ still names its shard.
      PyObject* shard = PyObject_GetAttrString(at, "_local_tensor");
      if (!shard) PythonCrossing::drop_error();
      inner = py::reinterpret_steal<py::object>(shard);
    }
    if (!inner || !is_tensor(inner.ptr()) || inner.ptr() == at) return py::object();
    keep = std::move(inner);
    at = keep.ptr();
  }
  return py::object();
}

at::Tensor held_tensor(const at::Tensor& t) {
  if (!t.defined() || !is_subclass(t)) return at::Tensor();
  if (!Py_IsInitialized()) return at::Tensor();
  PythonCrossing::Gil gil;
  PyObject* obj = THPVariable_Wrap(t);
  if (!obj) {
    PythonCrossing::drop_error();
    return at::Tensor();
  }
  py::object owned = py::reinterpret_steal<py::object>(obj);
  py::object inner = held_tensor_object(obj);
  return inner ? THPVariable_Unpack(inner.ptr()) : at::Tensor();
}

}  // namespace msprobe
