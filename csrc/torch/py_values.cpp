#include "torch/py_values.h"

#include <limits>

#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Layout.h>
#include <torch/csrc/MemoryFormat.h>
#include <torch/csrc/Size.h>
#include <torch/csrc/autograd/python_variable.h>

namespace msprobe {

namespace {

constexpr int kMaxDepth = 32;  // nested argument lists deeper than this are cut, not recursed

Scalar py_scalar(PyObject* v) {
  if (v == Py_None) return Scalar::null();
  if (PyBool_Check(v)) return Scalar::of_bool(v == Py_True);
  if (PyLong_Check(v)) {
    int overflow = 0;
    const long long i = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow == 0) return Scalar::of_int(i);
    const double d = PyLong_AsDouble(v);
    if (d == -1.0 && PyErr_Occurred()) {
      // Beyond a double's range: recorded as the infinity of its sign, and no Python error left
      // set for whatever C-API call comes next.
      PyErr_Clear();
      return Scalar::of_float(overflow > 0 ? std::numeric_limits<double>::infinity()
                                           : -std::numeric_limits<double>::infinity());
    }
    return Scalar::of_float(d);
  }
  if (PyFloat_Check(v)) return Scalar::of_float(PyFloat_AS_DOUBLE(v));
  return Scalar::null();
}

std::string py_str(PyObject* obj) {
  PyObject* s = PyObject_Str(obj);
  if (!s) {
    PyErr_Clear();
    return "";
  }
  Py_ssize_t n = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(s, &n);
  std::string out = utf8 ? std::string(utf8, static_cast<size_t>(n)) : std::string();
  if (!utf8) PyErr_Clear();
  Py_DECREF(s);
  return out;
}

Entry describe(PyObject* obj, const DescribeOptions& options, const std::string& stem, int depth) {
  if (THPVariable_Check(obj)) return describe_tensor_for(THPVariable_Unpack(obj), options, stem);
  if (obj == Py_None) return Entry::null_entry();
  if (PyBool_Check(obj)) return Entry::scalar("bool", Scalar::of_bool(obj == Py_True));
  if (PyLong_Check(obj)) return Entry::scalar("int", py_scalar(obj));
  if (PyFloat_Check(obj)) return Entry::scalar("float", py_scalar(obj));
  if (PyUnicode_Check(obj)) {
    Py_ssize_t n = 0;
    const char* utf8 = PyUnicode_AsUTF8AndSize(obj, &n);
    if (!utf8) {
      PyErr_Clear();
      return Entry::scalar("str", Scalar::null());
    }
    return Entry::scalar("str", Scalar::of_string(std::string(utf8, static_cast<size_t>(n))));
  }
  if (THPSize_Check(obj)) {
    std::vector<Scalar> dims;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(obj); ++i) {
      dims.push_back(py_scalar(PyTuple_GET_ITEM(obj, i)));
    }
    return Entry::scalar("torch.Size", Scalar::of_list(std::move(dims)));
  }
  if (PyTuple_Check(obj) || PyList_Check(obj)) {
    if (depth >= kMaxDepth) return Entry::null_entry();
    PyObject* seq = obj;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    std::vector<Entry> items;
    items.reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      items.push_back(describe(PySequence_Fast_GET_ITEM(seq, i), options,
                               options.item_stem(stem, static_cast<size_t>(i)), depth + 1));
    }
    return Entry::list(std::move(items));
  }
  if (PySlice_Check(obj)) {
    auto* sl = reinterpret_cast<PySliceObject*>(obj);
    return Entry::scalar(
        "slice", Scalar::of_list({py_scalar(sl->start), py_scalar(sl->stop), py_scalar(sl->step)}));
  }
  if (obj == Py_Ellipsis) return Entry::scalar("ellipsis", Scalar::of_string("..."));
  if (THPDtype_Check(obj)) return Entry::scalar("torch.dtype", Scalar::of_string(py_str(obj)));
  if (THPDevice_Check(obj)) return Entry::scalar("torch.device", Scalar::of_string(py_str(obj)));
  if (THPMemoryFormat_Check(obj)) {
    // msprobe writes {"type": "torch.memory_format", "format": "preserve_format"}.
    std::string name = py_str(obj);
    if (name.rfind("torch.", 0) == 0) name.erase(0, 6);
    return Entry::scalar("torch.memory_format", Scalar::of_string(std::move(name)));
  }
  if (THPLayout_Check(obj)) return Entry::scalar("torch.layout", Scalar::of_string(py_str(obj)));
  return Entry::null_entry();
}

}  // namespace

Entry describe_value(PyObject* obj, const DescribeOptions& options, const std::string& stem) {
  return describe(obj, options, stem, 0);
}

std::vector<Entry> describe_items(PyObject* seq, const DescribeOptions& options,
                                  const std::string& stem) {
  if ((PyTuple_Check(seq) && !THPSize_Check(seq)) || PyList_Check(seq)) {
    return describe(seq, options, stem, 0).items;
  }
  return {describe(seq, options, options.item_stem(stem, 0), 0)};
}

}  // namespace msprobe
