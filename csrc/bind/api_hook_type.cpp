#include "bind/api_hook_type.h"

#include <structmember.h>

#include <string>

#include "live/hooks/api_hook.h"

namespace py = pybind11;

namespace msprobe {

namespace {

struct ApiHookObject {
  PyObject_HEAD ApiHook* hook;
};

ApiHook& hook_of(PyObject* self) {
  return *reinterpret_cast<ApiHookObject*>(self)->hook;
}

// C++ exceptions become Python ones as pybind11's own functions translate them (our registered
// ConfigError, WriteError, ... included).
PyObject* raise_current_exception() {
  try {
    throw;
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (...) {
    if (!py::detail::apply_exception_translators(
            py::detail::get_local_internals().registered_exception_translators) &&
        !py::detail::apply_exception_translators(
            py::detail::get_internals().registered_exception_translators)) {
      PyErr_SetString(PyExc_SystemError, "msprobe_cpp: an unknown C++ exception escaped a hook");
    }
  }
  return nullptr;
}

PyObject* hook_call(PyObject* self, PyObject* args, PyObject* kwargs) {
  try {
    return hook_of(self).call(args, kwargs).release().ptr();
  } catch (...) {
    return raise_current_exception();
  }
}

PyObject* hook_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* kNames[] = {"api", "original", nullptr};
  const char* api = nullptr;
  PyObject* original = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sO:ApiHook", const_cast<char**>(kNames), &api,
                                   &original)) {
    return nullptr;
  }
  PyObject* self = type->tp_alloc(type, 0);
  if (!self) return nullptr;
  try {
    reinterpret_cast<ApiHookObject*>(self)->hook =
        new ApiHook(api, py::reinterpret_borrow<py::object>(original));
  } catch (...) {
    Py_DECREF(self);
    return raise_current_exception();
  }
  return self;
}

void hook_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  delete reinterpret_cast<ApiHookObject*>(self)->hook;
  type->tp_free(self);
  Py_DECREF(type);  // a heap type's instances hold a reference to it
}

PyObject* hook_original(PyObject* self, void*) {
  return py::object(hook_of(self).original()).release().ptr();
}

PyObject* hook_api(PyObject* self, void*) {
  const std::string& api = hook_of(self).api();
  return PyUnicode_FromStringAndSize(api.data(), static_cast<Py_ssize_t>(api.size()));
}

PyGetSetDef kGetSet[] = {
    {"original", hook_original, nullptr, "the torch callable this hook replaced", nullptr},
    {"api", hook_api, nullptr, "the API's dump name prefix, e.g. \"Functional.linear\"", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyType_Slot kSlots[] = {
    {Py_tp_new, reinterpret_cast<void*>(hook_new)},
    {Py_tp_dealloc, reinterpret_cast<void*>(hook_dealloc)},
    {Py_tp_call, reinterpret_cast<void*>(hook_call)},
    {Py_tp_getset, kGetSet},
    {Py_tp_doc, const_cast<char*>("ApiHook(api, original): a hooked torch API")},
    {0, nullptr},
};

PyType_Spec kSpec = {
    "msprobe_cpp._C.ApiHook", sizeof(ApiHookObject), 0, Py_TPFLAGS_DEFAULT, kSlots,
};

}  // namespace

void add_api_hook_type(py::module_& m) {
  PyObject* type = PyType_FromSpec(&kSpec);
  if (!type) throw py::error_already_set();
  m.add_object("ApiHook", py::reinterpret_steal<py::object>(type));
}

}  // namespace msprobe
