#include "live/hooks/debug_save.h"

#include <torch/csrc/autograd/python_variable.h>

#include <vector>

#include "live/capture/call_values.h"
#include "live/capture/is_tensor.h"
#include "live/capture/live_tensors.h"
#include "live/capture/tensor_entry.h"
#include "live/hooks/submit.h"
#include "live/log/tool_log.h"
#include "live/crossing/python_crossing.h"

namespace py = pybind11;

namespace msprobe {

namespace {

// What 26.x's save takes: a tensor, int, float, str (bool is an int), or lists, tuples and dicts
// with str keys of those.
bool savable(py::handle v, int depth = 0) {
  if (depth > 32) return false;
  if (is_tensor(v.ptr()) || PyLong_Check(v.ptr()) || PyFloat_Check(v.ptr()) ||
      PyUnicode_Check(v.ptr()))
    return true;
  if (PyList_Check(v.ptr()) || PyTuple_Check(v.ptr())) {
    for (py::handle item : v) {
      if (!savable(item, depth + 1)) return false;
    }
    return true;
  }
  if (PyDict_Check(v.ptr())) {
    for (auto kv : py::reinterpret_borrow<py::dict>(v)) {
      if (!PyUnicode_Check(kv.first.ptr()) || !savable(kv.second, depth + 1)) return false;
    }
    return true;
  }
  return false;
}

// The same nesting with every leaf null: a gradient record before its gradients arrive.
Entry skeleton_of(const Entry& e) {
  if (!e.has_items()) return Entry::null_entry();
  Entry out = e;
  for (Entry& item : out.items) item = skeleton_of(item);
  return out;
}

// The paths (item indices) of the tensor leaves of `e`, depth first: the order value_entry
// gives their tensors in.
void tensor_paths(const Entry& e, std::vector<size_t>& at, std::vector<std::vector<size_t>>& out) {
  if (e.is_tensor()) out.push_back(at);
  for (size_t i = 0; i < e.items.size(); ++i) {
    at.push_back(i);
    tensor_paths(e.items[i], at, out);
    at.pop_back();
  }
}

std::vector<at::Tensor> leaf_tensors(const LiveArg& live) {
  if (live.tensor.defined()) return {live.tensor};
  return live.items;
}

StoredCall value_record(std::string name, Entry value, uint64_t epoch) {
  StoredCall call;
  call.epoch = epoch;
  call.record.name = std::move(name);
  call.record.bare_value = true;
  call.record.has_inputs = false;
  call.record.outputs.push_back(std::move(value));
  return call;
}

// Fills one leaf of "<name>_grad.<n>.debug" when its tensor's gradient arrives: a record of the
// skeleton with that leaf set, which the writer lays over the others of its name.
struct GradLeaf {
  std::weak_ptr<Session> session;
  std::string name;
  Entry skeleton;
  std::vector<size_t> path;
  std::string stem;  // task tensor: the saved gradient's file name
  uint64_t epoch;

  void operator()(const at::Tensor& grad) const {
    std::shared_ptr<Session> s = session.lock();
    if (!s || !grad.defined()) return;
    Entry value = skeleton;
    Entry* leaf = &value;
    for (size_t i : path) leaf = &leaf->items[i];
    *leaf = tensor_entry(grad, s->hooks().capture.options(), stem);
    submit(*s, value_record(name, std::move(value), epoch), LiveTensors{}, Caller::AutogradEngine);
  }
};

std::string leaf_stem(const EntryOptions& options, std::string stem,
                      const std::vector<size_t>& path, const Entry& value) {
  const Entry* e = &value;
  for (size_t i : path) {
    stem = i < e->keys.size() ? options.key_stem(stem, e->keys[i]) : options.item_stem(stem, i);
    e = &e->items[i];
  }
  return stem;
}

}  // namespace

void save_debug_value(const std::shared_ptr<Session>& session, py::handle variable,
                      py::handle name, py::handle save_backward, int rank) {
  PythonCrossing::assert_gil();
  Session& s = *session;
  const Config& c = s.config();
  if (c.level != Level::Debug || (c.task != Task::Statistics && c.task != Task::Tensor)) return;
  if (!PyUnicode_Check(name.ptr()) || !PyBool_Check(save_backward.ptr()) || !savable(variable)) {
    say_warning("PrecisionDebugger.save: skipped: expected a tensor, int, float or str (or lists, "
                "tuples and dicts of them), a str name and a bool save_backward, got " +
                std::string(Py_TYPE(variable.ptr())->tp_name) + ", " +
                Py_TYPE(name.ptr())->tp_name + ", " + Py_TYPE(save_backward.ptr())->tp_name);
    return;
  }
  if (!s.began_step()) s.start(rank, false);
  if (!s.hooks().gate.forward()) return;  // a step or rank the config leaves out
  const std::string base = name.cast<std::string>();
  CallNumbering& numbering = s.hooks().numbering;
  const std::string n = std::to_string(numbering.next_index(base + ".debug"));
  const std::string forward = base + "." + n + ".debug";
  const std::string backward = base + "_grad." + n + ".debug";
  const EntryOptions& options = s.hooks().capture.options();
  LiveArg live;
  Entry value = value_entry(variable, options, options.saver ? forward : "", &live);
  const uint64_t epoch = numbering.epoch();
  const bool grads = save_backward.ptr() == Py_True;
  Entry skeleton = grads ? skeleton_of(value) : Entry();
  std::vector<std::vector<size_t>> paths;
  std::vector<size_t> at;
  if (grads) tensor_paths(value, at, paths);
  const std::vector<at::Tensor> tensors = leaf_tensors(live);
  s.add(value_record(forward, value, epoch));
  if (!grads) return;
  s.add(value_record(backward, skeleton, epoch));
  for (size_t i = 0; i < paths.size() && i < tensors.size(); ++i) {
    at::Tensor t = tensors[i];
    if (!t.requires_grad()) continue;
    const std::string stem = options.saver ? leaf_stem(options, backward, paths[i], value) : "";
    t.register_hook(GradLeaf{session, backward, skeleton, paths[i], stem, epoch});
  }
}

}  // namespace msprobe
