// Python's call stack, read through the C API in handles (docs/architecture.md, "Crossings"):
// the one place that casts between frame and code objects and Python's object type, so that the
// hooks and the call-stack capture walk frames without a raw PyObject*. Every function needs the
// GIL.
#pragma once

#include <Python.h>
#include <frameobject.h>
#include <pybind11/pybind11.h>

#include "live/crossing/python_crossing.h"

namespace msprobe {

class PythonFrames {
 public:
  // The frame running now on this thread, borrowed; null when no Python code runs.
  static pybind11::handle current() {
    PythonCrossing::assert_gil();
    return as_object(PyEval_GetFrame());
  }
  // The frame that called `frame`, or null at the bottom of the stack.
  static pybind11::object caller(pybind11::handle frame) {
    return PythonCrossing::owned(as_object(PyFrame_GetBack(as_frame(frame))));
  }
  // The code object `frame` runs.
  static pybind11::object code(pybind11::handle frame) {
    return PythonCrossing::owned(as_object(PyFrame_GetCode(as_frame(frame))));
  }
  // The file name of `code` (a str), borrowed from it.
  static pybind11::handle file_of(pybind11::handle code) {
    return reinterpret_cast<PyCodeObject*>(code.ptr())->co_filename;
  }
  // Where `frame` is: the byte offset of its instruction (3.11 on, decoded by line_at() when a
  // step is written), else its line number.
  static int place(pybind11::handle frame) {
#if PY_VERSION_HEX >= 0x030B0000
    return PyFrame_GetLasti(as_frame(frame));
#else
    return PyFrame_GetLineNumber(as_frame(frame));
#endif
  }
  // The line of a place() in `code`; -1 where it has none.
  static int line_at(pybind11::handle code, int place) {
#if PY_VERSION_HEX >= 0x030B0000
    return place < 0 ? -1 : PyCode_Addr2Line(reinterpret_cast<PyCodeObject*>(code.ptr()), place);
#else
    static_cast<void>(code);
    return place;
#endif
  }

 private:
  template <typename T>
  static pybind11::handle as_object(T* p) {
    return reinterpret_cast<PyObject*>(p);
  }
  static PyFrameObject* as_frame(pybind11::handle frame) {
    return reinterpret_cast<PyFrameObject*>(frame.ptr());
  }
};

}  // namespace msprobe
