#include "bind/api_hook_type.h"

#include <structmember.h>

#include <string>

#include "live/crossing/python_crossing.h"
#include "live/hooks/api_hook.h"

namespace py = pybind11;

namespace msprobe {

namespace {

// What `function()` made: its method definition must outlive the function, whose m_self is the
// hook object, so the hook object owns it.
struct HookFunctionDef {
  std::string name, doc;
  PyMethodDef def{};
};

struct ApiHookObject {
  PyObject_HEAD ApiHook* hook;
  HookFunctionDef* function;
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
    return PythonCrossing::fail(e);
  } catch (...) {
    if (!py::detail::apply_exception_translators(
            py::detail::get_local_internals().registered_exception_translators) &&
        !py::detail::apply_exception_translators(
            py::detail::get_internals().registered_exception_translators)) {
      return PythonCrossing::fail(PyExc_SystemError,
                                  "msprobe_cpp: an unknown C++ exception escaped a hook");
    }
  }
  return nullptr;  // a translator set the error
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
    reinterpret_cast<ApiHookObject*>(self)->function = nullptr;
    reinterpret_cast<ApiHookObject*>(self)->hook =
        new ApiHook(api, py::reinterpret_borrow<py::object>(original));
  } catch (...) {
    PythonCrossing::let_go(self);
    return raise_current_exception();
  }
  return self;
}

void hook_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  delete reinterpret_cast<ApiHookObject*>(self)->hook;
  delete reinterpret_cast<ApiHookObject*>(self)->function;
  type->tp_free(self);
  PythonCrossing::let_go(
      reinterpret_cast<PyObject*>(type));  // a heap type's instances hold a reference to it
}

PyObject* hook_original(PyObject* self, void*) {
  return py::object(hook_of(self).original()).release().ptr();
}

PyObject* hook_api(PyObject* self, void*) {
  const std::string& api = hook_of(self).api();
  return PyUnicode_FromStringAndSize(api.data(), static_cast<Py_ssize_t>(api.size()));
}

// hook.function(name, doc, module): the hook as a builtin function named like the original. That
// is the one kind of C callable that torch.compile can be told to trace as the original
// (torch._dynamo.substitute_in_graph), so torch 2.x puts no Python frame in front of an eager call
// (compile_seam.py); and torch's own code reads an API's __name__ (inductor names its kernels by
// it). Made once per hook.
PyObject* hook_function(PyObject* self, PyObject* args) {
  const char* name = nullptr;
  const char* doc = nullptr;
  PyObject* module = nullptr;
  if (!PyArg_ParseTuple(args, "szO:function", &name, &doc, &module)) return nullptr;
  auto* obj = reinterpret_cast<ApiHookObject*>(self);
  if (obj->function) {
    return PythonCrossing::fail(PyExc_RuntimeError, "ApiHook.function(): made already");
  }
  obj->function = new HookFunctionDef{name, doc ? doc : "", {}};
  PyMethodDef& def = obj->function->def;
  def.ml_name = obj->function->name.c_str();
  def.ml_meth = reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(hook_call));
  def.ml_flags = METH_VARARGS | METH_KEYWORDS;
  def.ml_doc = doc ? obj->function->doc.c_str() : nullptr;
  return PyCFunction_NewEx(&def, self, module == Py_None ? nullptr : module);
}

PyMethodDef kMethods[] = {
    {"function", hook_function, METH_VARARGS,
     "function(name, doc, module): the hook as a builtin function named like the original"},
    {nullptr, nullptr, 0, nullptr},
};

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
    {Py_tp_methods, kMethods},
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
