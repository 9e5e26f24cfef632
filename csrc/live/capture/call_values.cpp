#include "live/capture/call_values.h"

#include <limits>

#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Layout.h>
#include <torch/csrc/MemoryFormat.h>
#include <torch/csrc/Size.h>
#include <torch/csrc/autograd/python_variable.h>

#include "live/capture/held_data.h"
#include "live/capture/is_tensor.h"
#include "live/crossing/python_crossing.h"

namespace py = pybind11;

namespace msprobe {

namespace {

constexpr int kMaxDepth = 32;  // nested argument lists deeper than this are cut, not recursed

// torch.distributed.ProcessGroup and a callable giving (ranks, md5 hex) of one, or None; given by
// Python where torch.distributed exists. Never released: they outlive the interpreter's end.
struct ProcessGroupSide {
  PyObject* type = nullptr;
  PyObject* facts = nullptr;
} g_process_group;

Scalar py_scalar(PyObject* v);

Entry process_group_entry(PyObject* group) {
  Entry e = Entry::scalar("torch.ProcessGroup", Scalar());
  const py::object facts =
      PythonCrossing::owned(PyObject_CallFunctionObjArgs(g_process_group.facts, group, nullptr));
  if (facts && PyTuple_Check(facts.ptr()) && PyTuple_GET_SIZE(facts.ptr()) == 2) {
    PyObject* ranks = PyTuple_GET_ITEM(facts.ptr(), 0);
    PyObject* id = PyTuple_GET_ITEM(facts.ptr(), 1);
    if (PyList_Check(ranks) && PyUnicode_Check(id)) {
      std::vector<Scalar> items;
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ranks); ++i) {
        items.push_back(py_scalar(PyList_GET_ITEM(ranks, i)));
      }
      e.value = Scalar::of_list(std::move(items));
      const char* utf8 = PyUnicode_AsUTF8(id);
      if (utf8) e.group_id = utf8;
    }
  }
  PythonCrossing::drop_error();  // a group whose ranks cannot be had is recorded by its type alone,
                                 // as msprobe's
  return e;
}

Scalar py_scalar(PyObject* v) {
  if (v == Py_None) return Scalar::null();
  if (PyBool_Check(v)) return Scalar::of_bool(v == Py_True);
  if (PyLong_Check(v)) {
    int overflow = 0;
    const long long i = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow == 0) return Scalar::of_int(i);
    const double d = PyLong_AsDouble(v);
    if (d == -1.0 && PythonCrossing::drop_error_if_set()) {
      // Beyond a double's range: recorded as the infinity of its sign, and no Python error left
      // set for whatever C-API call comes next.
      return Scalar::of_float(overflow > 0 ? std::numeric_limits<double>::infinity()
                                           : -std::numeric_limits<double>::infinity());
    }
    return Scalar::of_float(d);
  }
  if (PyFloat_Check(v)) return Scalar::of_float(PyFloat_AS_DOUBLE(v));
  return Scalar::null();
}

std::string py_str(PyObject* obj) {
  const py::object s = PythonCrossing::owned(PyObject_Str(obj));
  if (!s) {
    PythonCrossing::drop_error();
    return "";
  }
  Py_ssize_t n = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(s.ptr(), &n);
  std::string out = utf8 ? std::string(utf8, static_cast<size_t>(n)) : std::string();
  if (!utf8) PythonCrossing::drop_error();
  return out;
}

// A value that is neither a tensor nor a list.
Entry value_entry_of(PyObject* obj) {
  if (obj == Py_None) return Entry::null_entry();
  if (PyBool_Check(obj)) return Entry::scalar("bool", Scalar::of_bool(obj == Py_True));
  if (PyLong_Check(obj)) return Entry::scalar("int", py_scalar(obj));
  if (PyFloat_Check(obj)) return Entry::scalar("float", py_scalar(obj));
  if (PyUnicode_Check(obj)) {
    Py_ssize_t n = 0;
    const char* utf8 = PyUnicode_AsUTF8AndSize(obj, &n);
    if (!utf8) {
      PythonCrossing::drop_error();
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
  if (g_process_group.type && PyObject_IsInstance(obj, g_process_group.type) == 1) {
    return process_group_entry(obj);
  }
  PythonCrossing::drop_error();
  return Entry::null_entry();
}

bool is_sequence(PyObject* o) {
  return (PyTuple_Check(o) && !THPSize_Check(o)) || PyList_Check(o);
}

// A type's attribute, looked up on the type alone (no instance __getattr__ runs), or null.
py::object type_attr(PyObject* o, const char* name) {
  py::object v =
      PythonCrossing::owned(PyObject_GetAttrString(reinterpret_cast<PyObject*>(Py_TYPE(o)), name));
  if (!v) PythonCrossing::drop_error();
  return v;
}

// The fields of a value msprobe 1.1.1 records as a mapping, in its order of tests: a namedtuple
// (its _fields), a dataclass (every field, None ones too: Hugging Face's ModelOutput is one, an
// OrderedDict that lists only the fields that are set), a dict. False for anything else; the
// common argument types cost one type test.
struct Fields {
  std::vector<std::string> keys;
  std::vector<py::object> values;
};
bool mapping_fields(PyObject* o, Fields& out) {
  PyTypeObject* t = Py_TYPE(o);
  if (t == &PyTuple_Type || t == &PyList_Type || t == &PyLong_Type || t == &PyFloat_Type ||
      t == &PyBool_Type || t == &PyUnicode_Type || o == Py_None || THPSize_Check(o)) {
    return false;
  }
  auto add = [&out](PyObject* key, py::object value) {
    const char* utf8 = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : nullptr;
    out.keys.push_back(utf8 ? std::string(utf8) : py_str(key));
    PythonCrossing::drop_error();
    out.values.push_back(std::move(value));
  };
  if (PyTuple_Check(o)) {  // a tuple subclass: a namedtuple has _fields
    const py::object fields = type_attr(o, "_fields");
    const bool named = fields && PyTuple_Check(fields.ptr()) &&
                       PyTuple_GET_SIZE(fields.ptr()) == PyTuple_GET_SIZE(o);
    if (named) {
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i) {
        add(PyTuple_GET_ITEM(fields.ptr(), i), PythonCrossing::shared(PyTuple_GET_ITEM(o, i)));
      }
    }
    return named;
  }
  if (const py::object fields = type_attr(o, "__dataclass_fields__")) {
    if (PyDict_Check(fields.ptr())) {
      PyObject *key, *field;
      Py_ssize_t pos = 0;
      while (PyDict_Next(fields.ptr(), &pos, &key, &field)) {
        py::object v = PythonCrossing::owned(PyObject_GetAttr(o, key));
        if (!v) {
          PythonCrossing::drop_error();
          v = py::none();
        }
        add(key, std::move(v));
      }
      return true;
    }
  }
  if (!PyDict_Check(o)) return false;
  // Items through the mapping protocol: an OrderedDict subclass keeps its own order there.
  const py::object items = PythonCrossing::owned(PyMapping_Items(o));
  if (!items) {
    PythonCrossing::drop_error();
    return false;
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items.ptr()); ++i) {
    PyObject* kv = PyList_GET_ITEM(items.ptr(), i);
    if (!PyTuple_Check(kv) || PyTuple_GET_SIZE(kv) != 2) continue;
    add(PyTuple_GET_ITEM(kv, 0), PythonCrossing::shared(PyTuple_GET_ITEM(kv, 1)));
  }
  return true;
}

// The one walk over a Python value: its entry (unless `options` is null) and, with `live`, its
// tensors in the depth-first order of the entry's tensor leaves, so an anomalous entry can be
// traced back to the tensor object that carried it.
Entry walk(PyObject* obj, const EntryOptions* options, const std::string& stem, int depth,
           LiveArg* live) {
  if (is_tensor(obj)) {
    const at::Tensor& t = THPVariable_Unpack(obj);
    // A DTensor (tensor parallel, FSDP2) is judged by this rank's shard: nothing else is read
    // without a collective, and an overflow is judged where a rank holds it.
    if (py::object held = held_tensor_object(obj))
      return walk(held.ptr(), options, stem, depth, live);
    if (live) (depth == 0 ? live->tensor : live->items.emplace_back()) = t;
    return options ? tensor_entry(t, *options, stem) : Entry();
  }
  if (Fields fields; mapping_fields(obj, fields)) {
    if (depth >= kMaxDepth) return Entry::null_entry();
    std::vector<Entry> items;
    if (options) items.reserve(fields.values.size());
    for (size_t i = 0; i < fields.values.size(); ++i) {
      Entry item = walk(fields.values[i].ptr(), options,
                        options ? options->key_stem(stem, fields.keys[i]) : stem, depth + 1, live);
      if (options) items.push_back(std::move(item));
    }
    return options ? Entry::map(std::move(fields.keys), std::move(items)) : Entry();
  }
  if (is_sequence(obj)) {
    if (depth >= kMaxDepth) return Entry::null_entry();
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
    std::vector<Entry> items;
    if (options) items.reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      Entry item =
          walk(PySequence_Fast_GET_ITEM(obj, i), options,
               options ? options->item_stem(stem, static_cast<size_t>(i)) : stem, depth + 1, live);
      if (options) items.push_back(std::move(item));
    }
    return Entry::list(std::move(items));
  }
  return options ? value_entry_of(obj) : Entry();
}

}  // namespace

Entry value_entry(PyObject* obj, const EntryOptions& options, const std::string& stem,
                  LiveArg* live) {
  PythonCrossing::assert_gil();
  return walk(obj, &options, stem, 0, live);
}

Entry kwarg_entry(PyObject* obj, const std::string& key, const EntryOptions& options,
                  const std::string& stem, LiveArg* live) {
  if (key == "device" && THPDevice_Check(obj)) {
    const py::object type = PythonCrossing::owned(PyObject_GetAttrString(obj, "type"));
    const py::object index = PythonCrossing::owned(PyObject_GetAttrString(obj, "index"));
    std::string text =
        (type ? py_str(type.ptr()) : std::string()) + ":" + (index ? py_str(index.ptr()) : "None");
    PythonCrossing::drop_error();
    return Entry::scalar("torch.device", Scalar::of_string(std::move(text)));
  }
  if (key == "device" && PyUnicode_Check(obj)) {
    return Entry::scalar("torch.device", Scalar::of_string(py_str(obj)));
  }
  return value_entry(obj, options, stem, live);
}

std::vector<std::pair<std::string, Entry>> kwarg_entries(PyObject* kwargs,
                                                         const EntryOptions& options,
                                                         const std::string& call,
                                                         std::vector<LiveArg>* live) {
  PythonCrossing::assert_gil();
  std::vector<std::pair<std::string, Entry>> out;
  if (!kwargs || !PyDict_Check(kwargs)) return out;
  out.reserve(static_cast<size_t>(PyDict_GET_SIZE(kwargs)));
  PyObject *key_object = nullptr, *value = nullptr;
  for (Py_ssize_t at = 0; PyDict_Next(kwargs, &at, &key_object, &value);) {
    // Keywords are str: read in place, no str() object made for each.
    Py_ssize_t size = 0;
    const char* utf8 =
        PyUnicode_Check(key_object) ? PyUnicode_AsUTF8AndSize(key_object, &size) : nullptr;
    if (!utf8) PythonCrossing::drop_error();  // not UTF-8: str() decides, as for any other key
    std::string key = utf8 ? std::string(utf8, static_cast<size_t>(size)) : py_str(key_object);
    Entry entry = kwarg_entry(value, key, options, options.kwarg_stem(call, key),
                              live ? &live->emplace_back() : nullptr);
    out.emplace_back(std::move(key), std::move(entry));
  }
  return out;
}

std::vector<Entry> item_entries(PyObject* seq, const EntryOptions& options, const std::string& stem,
                                std::vector<LiveArg>* live) {
  PythonCrossing::assert_gil();
  if (!is_sequence(seq)) {
    if (live) live->emplace_back();
    return {walk(seq, &options, options.item_stem(stem, 0), 0, live ? &live->back() : nullptr)};
  }
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  std::vector<Entry> out;
  out.reserve(static_cast<size_t>(n));
  if (live) live->reserve(live->size() + static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (live) live->emplace_back();
    out.push_back(walk(PySequence_Fast_GET_ITEM(seq, i), &options,
                       options.item_stem(stem, static_cast<size_t>(i)), 0,
                       live ? &live->back() : nullptr));
  }
  return out;
}

std::vector<LiveArg> live_args_of(PyObject* seq) {
  PythonCrossing::assert_gil();
  std::vector<LiveArg> out;
  if (!is_sequence(seq)) {
    walk(seq, nullptr, "", 0, &out.emplace_back());
    return out;
  }
  out.resize(static_cast<size_t>(PySequence_Fast_GET_SIZE(seq)));
  for (size_t i = 0; i < out.size(); ++i) {
    walk(PySequence_Fast_GET_ITEM(seq, static_cast<Py_ssize_t>(i)), nullptr, "", 0, &out[i]);
  }
  return out;
}

void set_process_group_facts(PyObject* type, PyObject* facts) {
  PythonCrossing::assert_gil();
  g_process_group = ProcessGroupSide{PythonCrossing::keep(type), PythonCrossing::keep(facts)};
}

}  // namespace msprobe
