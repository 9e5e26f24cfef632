#include "live/monitor/monitor_collectives.h"

#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <utility>

#include "core/monitor_aggregate.h"
#include "live/capture/is_tensor.h"
#include "live/crossing/python_crossing.h"
#include "live/crossing/python_frames.h"
#include "live/monitor/monitor_stats.h"

namespace msprobe {

namespace py = pybind11;

namespace {

// msprobe's stack_blacklist.yaml: frames of these files are left out of a call's stack (its
// own wrappers', torch's Module.__call__, a debugger's).
const char* const kLeftOutFrames[] = {"msprobe/pytorch/monitor/distributed",
                                      "site-packages/torch/nn/modules/module.py",
                                      "multiprocessing", "debugpy"};

// "<file>[<line>]   <function>" of each frame, innermost first, joined by ';' (msprobe's
// get_callstack). GIL required.
std::string call_stack_text() {
  PythonCrossing::assert_gil();
  std::string out;
  for (py::object frame = PythonCrossing::shared(PythonFrames::current()); frame;
       frame = PythonFrames::caller(frame)) {
    const py::object code = PythonFrames::code(frame);
    const std::string file = py::str(PythonFrames::file_of(code));
    const std::string where =
        file + "[" + std::to_string(PythonFrames::line_at(code, PythonFrames::place(frame))) + "]";
    bool left_out = false;
    for (const char* pattern : kLeftOutFrames) {
      left_out = left_out || where.find(pattern) != std::string::npos;
    }
    if (left_out) continue;
    if (!out.empty()) out += ";";
    out += where + "   " + py::str(code.attr("co_name")).cast<std::string>();
  }
  return out;
}

// The tensor msprobe looks at for one argument: a tensor, a list of tensors stacked, a list of
// P2POps' tensors stacked; undefined for anything else.
at::Tensor argument_tensor(py::handle arg) {
  if (is_tensor(arg)) return tensor_of(arg);
  if (!py::isinstance<py::list>(arg) || py::len(arg) == 0) return {};
  const py::list items = py::reinterpret_borrow<py::list>(arg);
  const bool p2p = !is_tensor(items[0]) && py::hasattr(items[0], "tensor") &&
                   std::string(py::str(py::type::of(items[0]).attr("__name__"))) == "P2POp";
  if (!is_tensor(items[0]) && !p2p) return {};
  std::vector<at::Tensor> tensors;
  for (const py::handle item : items) {
    const py::object t = p2p ? py::reinterpret_borrow<py::object>(item).attr("tensor")
                             : py::reinterpret_borrow<py::object>(item);
    if (!is_tensor(t)) return {};
    tensors.push_back(tensor_of(t));
  }
  return at::stack(tensors);
}

}  // namespace

MonitorCollectives::MonitorCollectives(const MonitorCollectivesConfig& config,
                                       MonitorMetrics metrics)
    : config_(config), metrics_(std::move(metrics)) {
  for (const std::string& pattern : config_.codeline) codeline_.emplace_back(pattern);
}

const std::vector<std::string>& MonitorCollectives::wrapped_names() {
  static const std::vector<std::string> kNames = {
      "send",           "recv",          "isend",          "irecv",
      "batch_isend_irecv", "broadcast",  "all_reduce",     "reduce",
      "scatter",        "reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor",
      "all_gather",     "gather",        "_all_gather_base", "all_gather_into_tensor"};
  return kNames;
}

py::object MonitorCollectives::wrapper(const std::string& name, py::object original) {
  PythonCrossing::assert_gil();
  std::weak_ptr<MonitorCollectives> owner = weak_from_this();
  // Called by the user's code with the GIL held; what the call raises reaches its caller as it
  // is, and nothing of the monitor's own does.
  return py::cpp_function([owner, name, original](const py::args& args, const py::kwargs& kwargs) {
    if (auto self = owner.lock()) return self->call(name, original, args, kwargs);
    return original(*args, **kwargs);
  });
}

py::object MonitorCollectives::wait_wrapper(py::object original, py::handle work_class) {
  PythonCrossing::assert_gil();
  work_class_ = py::reinterpret_borrow<py::object>(work_class);
  std::weak_ptr<MonitorCollectives> owner = weak_from_this();
  return py::cpp_function(
      [owner, original](py::object work, const py::args& args, const py::kwargs& kwargs) {
        py::object out = original(work, *args, **kwargs);
        if (auto self = owner.lock()) self->waited(work);
        return out;
      },
      py::is_method(work_class));
}

bool MonitorCollectives::wanted_here(std::string* stack) const {
  if (codeline_.empty() && !config_.log_only) return true;
  *stack = call_stack_text();
  if (codeline_.empty()) return true;
  for (const std::regex& pattern : codeline_) {
    if (std::regex_search(*stack, pattern)) return true;
  }
  return false;
}

py::object MonitorCollectives::call(const std::string& name, const py::object& original,
                                    const py::args& args, const py::kwargs& kwargs) {
  PythonCrossing::assert_gil();
  std::string stack;
  const bool wanted = wanted_here(&stack);
  if (config_.log_only) {
    logged_[name].insert(stack);
    return original(*args, **kwargs);
  }
  py::list arguments;
  for (const py::handle a : args) arguments.append(a);
  for (const auto& item : kwargs) arguments.append(item.second);
  const py::tuple all = py::tuple(arguments);
  if (wanted && config_.pre_hook) record(name, all, "pre");
  py::object out = original(*args, **kwargs);
  if (!wanted) return out;
  if (!py::bool_(out)) {
    record(name, all, "post");
  } else if (work_class_ && py::isinstance(out, work_class_)) {
    pending_.push_back({out, name, all});  // looked at once it is waited for
  } else if (py::isinstance<py::list>(out)) {  // batch_isend_irecv: one Work per operation
    for (const py::handle work : out) {
      pending_.push_back({py::reinterpret_borrow<py::object>(work), name, all});
    }
  }
  return out;
}

void MonitorCollectives::waited(py::handle work) {
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (!pending_[i].work.is(work)) continue;
    Pending done = std::move(pending_[i]);
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    record(done.name, done.arguments, "post");
    return;
  }
}

MonitorCollectives::Calls& MonitorCollectives::calls_of(const std::string& name) {
  for (Calls& c : calls_) {
    if (c.name == name) return c;
  }
  calls_.push_back({name, {}, {}});
  return calls_.back();
}

void MonitorCollectives::record(const std::string& name, const py::tuple& arguments,
                                const char* prefix) {
  Calls& calls = calls_of(name);
  size_t n = 0;
  at::NoGradGuard no_grad;
  for (const py::handle arg : arguments) {
    at::Tensor t;
    try {
      t = argument_tensor(arg);
    } catch (const std::exception&) {
      continue;  // tensors that cannot be stacked: msprobe fails there, the training must not
    }
    if (!t.defined()) continue;
    const std::string tag = std::string(prefix) + "_" + std::to_string(n++);
    auto [slot, is_new] = calls.values.try_emplace(tag, metrics_.ops.size());
    if (is_new) calls.tags.push_back(tag);
    const std::vector<MonitorValue> values = monitor_values(t, metrics_);
    for (size_t i = 0; i < metrics_.ops.size() && i < values.size(); ++i) {
      slot->second[i].push_back(values[i]);
    }
  }
}

MonitorCollectives::Rows MonitorCollectives::take_rows(int64_t step) {
  PythonCrossing::assert_gil();
  Rows rows;
  // msprobe keeps each collective's place from its first call ever; a step without its calls
  // writes no row for it.
  for (Calls& calls : calls_) {
    std::vector<MonitorValue> values;
    for (const std::string& tag : calls.tags) {
      const auto& per_op = calls.values.at(tag);
      MonitorCallSlot slot{calls.name, tag, {}};
      for (size_t i = 0; i < metrics_.ops.size(); ++i) {
        slot.values.push_back(monitor_aggregate(metrics_.ops[i], per_op[i]));
      }
      values.insert(values.end(), slot.values.begin(), slot.values.end());
      rows.slots.push_back(std::move(slot));
    }
    calls.tags.clear();
    calls.values.clear();
    if (values.empty()) continue;
    std::vector<MonitorValue> row = {MonitorValue::of_text(calls.name), values.front(),
                                     MonitorValue::of_integer(step)};
    row.insert(row.end(), values.begin() + 1, values.end());
    rows.cells.push_back(std::move(row));
  }
  return rows;
}

std::string MonitorCollectives::logged_stacks() const {
  nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  for (const auto& [name, stacks] : logged_) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const std::string& stack : stacks) {
      nlohmann::ordered_json frames = nlohmann::ordered_json::array();
      size_t start = 0;
      for (size_t end; (end = stack.find(';', start)) != std::string::npos; start = end + 1) {
        frames.push_back(stack.substr(start, end - start));
      }
      frames.push_back(stack.substr(start));
      list.push_back(std::move(frames));
    }
    doc[name] = std::move(list);
  }
  return doc.dump();
}

}  // namespace msprobe
