// The one way C++ crosses into Python (docs/architecture.md, "Crossings"). Every file of csrc/
// takes the GIL, holds or lets go of a Python reference and drops a Python error through this
// class alone; tools/architecture_checks.py fails the suite on any other site.
//
// - The GIL: one style, pybind11's gil_scoped_acquire (Gil), which also serves a thread Python
//   does not know (the autograd engine's). Code that needs the GIL held says so with
//   assert_gil(), checked in debug builds, as pybind11's gil.h checks its own.
// - References: a local one is a pybind11::object (owned(), shared()): released on every path. A
//   reference kept beyond one scope in a handle (a thread's open module calls, the code
//   registry, the logging sink) is taken with keep() and given back with let_go(), both here.
// - Errors: a C-API probe that fails (a missing attribute, an unencodable string) leaves an
//   error that is not the program's: drop_error() clears it, so the next C-API call starts
//   clean. An error on its way to Python is kept aside across a crossing by KeptError. A failure
//   that is the user's (a hook's callback raising) becomes pybind11::error_already_set, which the
//   binding turns back into the Python exception.
#pragma once

#include <pybind11/pybind11.h>
#include <torch/csrc/Exceptions.h>

#include <cassert>
#include <functional>

namespace msprobe {

class PythonCrossing {
 public:
  using Gil = pybind11::gil_scoped_acquire;    // takes the GIL unless this thread holds it
  using NoGil = pybind11::gil_scoped_release;  // gives it up around a wait (a device, a file)

  static void assert_gil() { assert(PyGILState_Check()); }

  // Gives the GIL up for a wait (a device sync) if this thread holds it; a thread without it
  // (the autograd engine's) just waits.
  class WithoutGil {
   public:
    WithoutGil() : saved_(PyGILState_Check() ? PyEval_SaveThread() : nullptr) {}
    ~WithoutGil() {
      if (saved_) PyEval_RestoreThread(saved_);
    }
    WithoutGil(const WithoutGil&) = delete;
    WithoutGil& operator=(const WithoutGil&) = delete;

   private:
    PyThreadState* saved_;
  };

  // A new reference, released when the object goes. Null stays null.
  static pybind11::object owned(pybind11::handle new_reference) {
    return pybind11::reinterpret_steal<pybind11::object>(new_reference);
  }
  // A borrowed reference, taken for as long as the object lives.
  static pybind11::object shared(pybind11::handle borrowed) {
    return pybind11::reinterpret_borrow<pybind11::object>(borrowed);
  }
  // A reference kept in a handle beyond one scope; let_go() gives it back. Null is a no-op.
  static pybind11::handle keep(pybind11::handle borrowed) {
    assert_gil();
    return borrowed.inc_ref();
  }
  static void let_go(pybind11::handle kept) {
    assert_gil();
    kept.dec_ref();
  }
  // Hashes and compares Python objects by identity: the key of a set or map of objects kept, or
  // of objects known by identity only (a module whose call is open).
  struct SameObject {
    size_t operator()(pybind11::handle h) const noexcept {
      return std::hash<const void*>()(h.ptr());
    }
    bool operator()(pybind11::handle a, pybind11::handle b) const noexcept { return a.is(b); }
  };

  static void drop_error() { PyErr_Clear(); }
  // After a C-API call whose failure value is also a valid one (PyLong_AsLong's -1): true, and
  // cleared, when it failed.
  static bool drop_error_if_set() {
    if (!PyErr_Occurred()) return false;
    PyErr_Clear();
    return true;
  }
  // Whether the error set now is a `type` (the error stays set).
  static bool error_is(PyObject* type) { return PyErr_ExceptionMatches(type); }

  // A C-API function's failure: sets the error and gives its null to return.
  static PyObject* fail(PyObject* type, const char* message) {
    PyErr_SetString(type, message);
    return nullptr;
  }
  static PyObject* fail(pybind11::error_already_set& e) {
    e.restore();
    return nullptr;
  }
  // A hook's Python error on the autograd engine's thread: thrown as torch's python_error, which
  // the engine carries to the thread that called backward() and raises there.
  [[noreturn]] static void rethrow_to_autograd(pybind11::error_already_set& e) {
    e.restore();
    python_error err;
    err.persist();
    throw err;
  }

  // Raises `error` (an instance of `type`) in Python, with `cause` (may be null) as its
  // __cause__: the error_already_set thrown carries it back through the binding.
  [[noreturn]] static void raise(pybind11::handle type, pybind11::handle error,
                                 pybind11::object cause) {
    if (cause) PyException_SetCause(error.ptr(), cause.release().ptr());  // steals it
    PyErr_SetObject(type.ptr(), error.ptr());
    throw pybind11::error_already_set();
  }

  // The error set now (a hook's, on its way to Python), kept aside for the scope and restored.
  class KeptError {
   public:
    KeptError() { PyErr_Fetch(&type_, &value_, &traceback_); }
    ~KeptError() { PyErr_Restore(type_, value_, traceback_); }
    KeptError(const KeptError&) = delete;
    KeptError& operator=(const KeptError&) = delete;

   private:
    PyObject *type_ = nullptr, *value_ = nullptr, *traceback_ = nullptr;
  };
};

}  // namespace msprobe
