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
  py::handle type;
  py::handle facts;
} g_process_group;

Scalar py_scalar(py::handle v);

Entry process_group_entry(py::handle group) {
  Entry e = Entry::scalar("torch.ProcessGroup", Scalar());
  const py::object facts = PythonCrossing::owned(
      PyObject_CallFunctionObjArgs(g_process_group.facts.ptr(), group.ptr(), nullptr));
  if (facts && PyTuple_Check(facts.ptr()) && PyTuple_GET_SIZE(facts.ptr()) == 2) {
    const py::handle ranks = PyTuple_GET_ITEM(facts.ptr(), 0);
    const py::handle id = PyTuple_GET_ITEM(facts.ptr(), 1);
    if (PyList_Check(ranks.ptr()) && PyUnicode_Check(id.ptr())) {
      std::vector<Scalar> items;
      for (const py::handle rank : py::reinterpret_borrow<py::list>(ranks)) {
        items.push_back(py_scalar(rank));
      }
      e.value = Scalar::of_list(std::move(items));
      const char* utf8 = PyUnicode_AsUTF8(id.ptr());
      if (utf8) e.group_id = utf8;
    }
  }
  PythonCrossing::drop_error();  // a group whose ranks cannot be had is recorded by its type alone,
                                 // as msprobe's
  return e;
}

Scalar py_scalar(py::handle v) {
  if (v.is_none()) return Scalar::null();
  if (PyBool_Check(v.ptr())) return Scalar::of_bool(v.ptr() == Py_True);
  if (PyLong_Check(v.ptr())) {
    int overflow = 0;
    const long long i = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (overflow == 0) return Scalar::of_int(i);
    const double d = PyLong_AsDouble(v.ptr());
    if (d == -1.0 && PythonCrossing::drop_error_if_set()) {
      // Beyond a double's range: recorded as the infinity of its sign, and no Python error left
      // set for whatever C-API call comes next.
      return Scalar::of_float(overflow > 0 ? std::numeric_limits<double>::infinity()
                                           : -std::numeric_limits<double>::infinity());
    }
    return Scalar::of_float(d);
  }
  if (PyFloat_Check(v.ptr())) return Scalar::of_float(PyFloat_AS_DOUBLE(v.ptr()));
  return Scalar::null();
}

std::string py_str(py::handle obj) {
  const py::object s = PythonCrossing::owned(PyObject_Str(obj.ptr()));
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
Entry value_entry_of(py::handle obj) {
  if (obj.is_none()) return Entry::null_entry();
  if (PyBool_Check(obj.ptr())) return Entry::scalar("bool", Scalar::of_bool(obj.ptr() == Py_True));
  if (PyLong_Check(obj.ptr())) return Entry::scalar("int", py_scalar(obj));
  if (PyFloat_Check(obj.ptr())) return Entry::scalar("float", py_scalar(obj));
  if (PyUnicode_Check(obj.ptr())) {
    Py_ssize_t n = 0;
    const char* utf8 = PyUnicode_AsUTF8AndSize(obj.ptr(), &n);
    if (!utf8) {
      PythonCrossing::drop_error();
      return Entry::scalar("str", Scalar::null());
    }
    return Entry::scalar("str", Scalar::of_string(std::string(utf8, static_cast<size_t>(n))));
  }
  if (THPSize_Check(obj.ptr())) {
    std::vector<Scalar> dims;
    for (const py::handle dim : py::reinterpret_borrow<py::tuple>(obj)) {
      dims.push_back(py_scalar(dim));
    }
    return Entry::scalar("torch.Size", Scalar::of_list(std::move(dims)));
  }
  if (PySlice_Check(obj.ptr())) {
    const auto* sl = reinterpret_cast<const PySliceObject*>(obj.ptr());
    return Entry::scalar(
        "slice", Scalar::of_list({py_scalar(sl->start), py_scalar(sl->stop), py_scalar(sl->step)}));
  }
  if (obj.ptr() == Py_Ellipsis) return Entry::scalar("ellipsis", Scalar::of_string("..."));
  if (THPDtype_Check(obj.ptr())) {
    return Entry::scalar("torch.dtype", Scalar::of_string(py_str(obj)));
  }
  if (THPDevice_Check(obj.ptr())) {
    return Entry::scalar("torch.device", Scalar::of_string(py_str(obj)));
  }
  if (THPMemoryFormat_Check(obj.ptr())) {
    // msprobe writes {"type": "torch.memory_format", "format": "preserve_format"}.
    std::string name = py_str(obj);
    if (name.rfind("torch.", 0) == 0) name.erase(0, 6);
    return Entry::scalar("torch.memory_format", Scalar::of_string(std::move(name)));
  }
  if (THPLayout_Check(obj.ptr())) {
    return Entry::scalar("torch.layout", Scalar::of_string(py_str(obj)));
  }
  if (g_process_group.type && PyObject_IsInstance(obj.ptr(), g_process_group.type.ptr()) == 1) {
    return process_group_entry(obj);
  }
  PythonCrossing::drop_error();
  return Entry::null_entry();
}

bool is_sequence(py::handle o) {
  return (PyTuple_Check(o.ptr()) && !THPSize_Check(o.ptr())) || PyList_Check(o.ptr());
}

// A type's attribute, looked up on the type alone (no instance __getattr__ runs), or null.
py::object type_attr(py::handle o, const char* name) {
  py::object v =
      PythonCrossing::owned(PyObject_GetAttrString(py::type::handle_of(o).ptr(), name));
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
bool mapping_fields(py::handle o, Fields& out) {
  const PyTypeObject* t = Py_TYPE(o.ptr());
  if (t == &PyTuple_Type || t == &PyList_Type || t == &PyLong_Type || t == &PyFloat_Type ||
      t == &PyBool_Type || t == &PyUnicode_Type || o.is_none() || THPSize_Check(o.ptr())) {
    return false;
  }
  auto add = [&out](py::handle key, py::object value) {
    const char* utf8 = PyUnicode_Check(key.ptr()) ? PyUnicode_AsUTF8(key.ptr()) : nullptr;
    out.keys.push_back(utf8 ? std::string(utf8) : py_str(key));
    PythonCrossing::drop_error();
    out.values.push_back(std::move(value));
  };
  if (PyTuple_Check(o.ptr())) {  // a tuple subclass: a namedtuple has _fields
    const py::object fields = type_attr(o, "_fields");
    const bool named = fields && PyTuple_Check(fields.ptr()) &&
                       PyTuple_GET_SIZE(fields.ptr()) == PyTuple_GET_SIZE(o.ptr());
    if (named) {
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o.ptr()); ++i) {
        add(PyTuple_GET_ITEM(fields.ptr(), i),
            PythonCrossing::shared(PyTuple_GET_ITEM(o.ptr(), i)));
      }
    }
    return named;
  }
  if (const py::object fields = type_attr(o, "__dataclass_fields__")) {
    if (PyDict_Check(fields.ptr())) {
      for (const auto& field : py::reinterpret_borrow<py::dict>(fields)) {
        py::object v = PythonCrossing::owned(PyObject_GetAttr(o.ptr(), field.first.ptr()));
        if (!v) {
          PythonCrossing::drop_error();
          v = py::none();
        }
        add(field.first, std::move(v));
      }
      return true;
    }
  }
  if (!PyDict_Check(o.ptr())) return false;
  // Items through the mapping protocol: an OrderedDict subclass keeps its own order there.
  const py::object items = PythonCrossing::owned(PyMapping_Items(o.ptr()));
  if (!items) {
    PythonCrossing::drop_error();
    return false;
  }
  for (const py::handle kv : py::reinterpret_borrow<py::list>(items)) {
    if (!PyTuple_Check(kv.ptr()) || PyTuple_GET_SIZE(kv.ptr()) != 2) continue;
    add(PyTuple_GET_ITEM(kv.ptr(), 0), PythonCrossing::shared(PyTuple_GET_ITEM(kv.ptr(), 1)));
  }
  return true;
}

// The one walk over a Python value: its entry (unless `options` is null) and, with `live`, its
// tensors in the depth-first order of the entry's tensor leaves, so an anomalous entry can be
// traced back to the tensor object that carried it.
Entry walk(py::handle obj, const EntryOptions* options, const std::string& stem, int depth,
           LiveArg* live) {
  if (is_tensor(obj)) {
    const at::Tensor& t = tensor_of(obj);
    // A DTensor (tensor parallel, FSDP2) is judged by this rank's shard: nothing else is read
    // without a collective, and an overflow is judged where a rank holds it.
    if (py::object held = held_tensor_object(obj)) return walk(held, options, stem, depth, live);
    if (live) (depth == 0 ? live->tensor : live->items.emplace_back()) = t;
    return options ? tensor_entry(t, *options, stem) : Entry();
  }
  if (Fields fields; mapping_fields(obj, fields)) {
    if (depth >= kMaxDepth) return Entry::null_entry();
    std::vector<Entry> items;
    if (options) items.reserve(fields.values.size());
    for (size_t i = 0; i < fields.values.size(); ++i) {
      Entry item = walk(fields.values[i], options,
                        options ? options->key_stem(stem, fields.keys[i]) : stem, depth + 1, live);
      if (options) items.push_back(std::move(item));
    }
    return options ? Entry::map(std::move(fields.keys), std::move(items)) : Entry();
  }
  if (is_sequence(obj)) {
    if (depth >= kMaxDepth) return Entry::null_entry();
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(obj.ptr());
    std::vector<Entry> items;
    if (options) items.reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      Entry item =
          walk(PySequence_Fast_GET_ITEM(obj.ptr(), i), options,
               options ? options->item_stem(stem, static_cast<size_t>(i)) : stem, depth + 1, live);
      if (options) items.push_back(std::move(item));
    }
    return Entry::list(std::move(items));
  }
  return options ? value_entry_of(obj) : Entry();
}

}  // namespace

Entry value_entry(py::handle obj, const EntryOptions& options, const std::string& stem,
                  LiveArg* live) {
  PythonCrossing::assert_gil();
  return walk(obj, &options, stem, 0, live);
}

Entry kwarg_entry(py::handle obj, const std::string& key, const EntryOptions& options,
                  const std::string& stem, LiveArg* live) {
  if (key == "device" && THPDevice_Check(obj.ptr())) {
    const py::object type = PythonCrossing::owned(PyObject_GetAttrString(obj.ptr(), "type"));
    const py::object index = PythonCrossing::owned(PyObject_GetAttrString(obj.ptr(), "index"));
    std::string text =
        (type ? py_str(type) : std::string()) + ":" + (index ? py_str(index) : "None");
    PythonCrossing::drop_error();
    return Entry::scalar("torch.device", Scalar::of_string(std::move(text)));
  }
  if (key == "device" && PyUnicode_Check(obj.ptr())) {
    return Entry::scalar("torch.device", Scalar::of_string(py_str(obj)));
  }
  return value_entry(obj, options, stem, live);
}

std::vector<std::pair<std::string, Entry>> kwarg_entries(py::handle kwargs,
                                                         const EntryOptions& options,
                                                         const std::string& call,
                                                         std::vector<LiveArg>* live) {
  PythonCrossing::assert_gil();
  std::vector<std::pair<std::string, Entry>> out;
  if (!kwargs || !PyDict_Check(kwargs.ptr())) return out;
  out.reserve(static_cast<size_t>(PyDict_GET_SIZE(kwargs.ptr())));
  for (const auto& [key_object, value] : py::reinterpret_borrow<py::dict>(kwargs)) {
    // Keywords are str: read in place, no str() object made for each.
    Py_ssize_t size = 0;
    const char* utf8 = PyUnicode_Check(key_object.ptr())
                           ? PyUnicode_AsUTF8AndSize(key_object.ptr(), &size)
                           : nullptr;
    if (!utf8) PythonCrossing::drop_error();  // not UTF-8: str() decides, as for any other key
    std::string key = utf8 ? std::string(utf8, static_cast<size_t>(size)) : py_str(key_object);
    Entry entry = kwarg_entry(value, key, options, options.kwarg_stem(call, key),
                              live ? &live->emplace_back() : nullptr);
    out.emplace_back(std::move(key), std::move(entry));
  }
  return out;
}

std::vector<Entry> item_entries(py::handle seq, const EntryOptions& options,
                                const std::string& stem, std::vector<LiveArg>* live) {
  PythonCrossing::assert_gil();
  if (!is_sequence(seq)) {
    if (live) live->emplace_back();
    return {walk(seq, &options, options.item_stem(stem, 0), 0, live ? &live->back() : nullptr)};
  }
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
  std::vector<Entry> out;
  out.reserve(static_cast<size_t>(n));
  if (live) live->reserve(live->size() + static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (live) live->emplace_back();
    out.push_back(walk(PySequence_Fast_GET_ITEM(seq.ptr(), i), &options,
                       options.item_stem(stem, static_cast<size_t>(i)), 0,
                       live ? &live->back() : nullptr));
  }
  return out;
}

std::vector<LiveArg> live_args_of(py::handle seq) {
  PythonCrossing::assert_gil();
  std::vector<LiveArg> out;
  if (!is_sequence(seq)) {
    walk(seq, nullptr, "", 0, &out.emplace_back());
    return out;
  }
  out.resize(static_cast<size_t>(PySequence_Fast_GET_SIZE(seq.ptr())));
  for (size_t i = 0; i < out.size(); ++i) {
    walk(PySequence_Fast_GET_ITEM(seq.ptr(), static_cast<Py_ssize_t>(i)), nullptr, "", 0, &out[i]);
  }
  return out;
}

void set_process_group_facts(py::handle type, py::handle facts) {
  PythonCrossing::assert_gil();
  g_process_group = ProcessGroupSide{PythonCrossing::keep(type), PythonCrossing::keep(facts)};
}

}  // namespace msprobe
