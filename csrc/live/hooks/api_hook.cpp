#include "live/hooks/api_hook.h"

#include <torch/csrc/autograd/python_variable.h>

#include <cmath>
#include <limits>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/anomaly.h"
#include "live/capture/call_values.h"
#include "live/capture/is_tensor.h"
#include "live/capture/live_tensors.h"
#include "live/capture/unwritten_memory.h"
#include "live/crossing/python_crossing.h"
#include "live/hooks/backward_recorder.h"
#include "live/hooks/compiled_region.h"
#include "live/hooks/hook_scope.h"
#include "live/hooks/submit.h"
#include "live/overflow/call_arguments.h"
#include "live/overflow/python_side.h"
#include "live/session/session.h"

namespace py = pybind11;

namespace msprobe {

namespace {

bool holds_any_anomaly(const CallRecord& rec) {
  bool any = false;
  for_each_entry(rec, [&](const Entry& e) { any = any || is_anomalous(e, false); });
  return any;
}

// Above it, the tensor a view is taken of is not read (EntryOptions::read_limit): 2^20 elements
// cost about 0.1 ms to scan on one core, a bound on what a view call adds whatever its base.
constexpr int64_t kViewBaseReadLimit = int64_t{1} << 20;

bool holds_view_base(const CallRecord& rec) {
  for (const Entry& e : rec.inputs)
    if (e.marks.view_base) return true;
  for (const auto& kv : rec.kwargs)
    if (kv.second.marks.view_base) return true;
  return false;
}

void mark_unwritten(Entry& e) {
  e.marks.unwritten = true;
  for (Entry& item : e.items) mark_unwritten(item);
}

// A collective's buffer that it writes and does not read: what it held before is no input.
void mark_write_only_buffer(const WrittenArgument& w, CallRecord& rec) {
  if (w.index < 0 || w.read) return;
  if (static_cast<size_t>(w.index) < rec.inputs.size()) {
    mark_unwritten(rec.inputs[w.index]);
    return;
  }
  for (auto& [key, entry] : rec.kwargs) {
    if (key == w.keyword) mark_unwritten(entry);
  }
}

// msprobe_cpp.OverflowError or DistributedStopError (both RuntimeErrors).
bool is_own_error(const py::error_already_set& error) {
  py::object module = py::getattr(error.type(), "__module__", py::none());
  return py::isinstance<py::str>(module) && module.cast<std::string>().rfind("msprobe_cpp", 0) == 0;
}

// The call wrote these: from now on their bytes are values.
void note_written(py::handle written) {
  if (!written) return;
  if (is_tensor(written)) {
    unwritten_memory().written(tensor_of(written));
  } else if (PyList_Check(written.ptr()) || PyTuple_Check(written.ptr())) {
    for (py::handle item : written) note_written(item);
  }
}

// A collective's buffer, written without a version bump: the session's statistics cache must not
// answer for it with what it held before the call (nor, for an asynchronous one, until the end
// of the step: its work may write it at any time until it is waited for).
void forget_cached_statistics(py::handle written) {
  if (!written) return;
  if (is_tensor(written)) {
    if (std::shared_ptr<Session> session = current_session()) {
      session->hooks().capture.written_without_version(tensor_of(written));
    }
  } else if (PyList_Check(written.ptr()) || PyTuple_Check(written.ptr())) {
    for (py::handle item : written) forget_cached_statistics(item);
  }
}

}  // namespace

namespace {

void collect_grad_fns(py::handle obj, std::vector<const torch::autograd::Node*>& out,
                      int depth) {
  if (is_tensor(obj)) {
    const torch::autograd::Node* fn = tensor_of(obj).grad_fn().get();
    if (fn) out.push_back(fn);
  } else if (is_py_sequence(obj) && depth < 4) {
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(obj.ptr()); ++i) {
      collect_grad_fns(PySequence_Fast_GET_ITEM(obj.ptr(), i), out, depth + 1);
    }
  }
}

// The autograd node that produced the call's first differentiable output, unless that node
// existed before the call (an API that returned one of its inputs, like `x.to(x.dtype)`).
NodePtr new_grad_fn(py::handle result, const std::vector<const torch::autograd::Node*>& before) {
  py::handle first = result;
  if (is_py_sequence(result)) {
    first = py::handle();
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(result.ptr()) && !first; ++i) {
      const py::handle item = PySequence_Fast_GET_ITEM(result.ptr(), i);
      if (is_tensor(item) && tensor_of(item).grad_fn()) first = item;
    }
  }
  if (!first || !is_tensor(first)) return nullptr;
  NodePtr fn = tensor_of(first).grad_fn();
  if (!fn) return nullptr;
  for (const auto* b : before) {
    if (b == fn.get()) return nullptr;
  }
  return fn;
}

}  // namespace

// The original with the very argument tuple and dict we were given: pybind11's `*args, **kwargs`
// unpacking would copy both on every call.
py::object ApiHook::call_original(py::handle args, py::handle kwargs, bool program_call) const {
  py::object result =
      PythonCrossing::owned(PyObject_Call(original_.ptr(), args.ptr(), kwargs.ptr()));
  if (!result) {
    // A collective inside the call that no hook sees (a DTensor's, made in C++) failed because
    // a peer stopped and left: that stop is the reason, raised as such (peer_stop.py's check
    // raises it, or DistributedStopError after this rank's own stop). Anything else goes through.
    // A stop that a nested hook raised already (a collective's Work.wait) goes through as it is.
    if (PythonCrossing::error_is(PyExc_RuntimeError)) {
      std::shared_ptr<Session> session = current_session();
      py::error_already_set original;  // fetched: the check runs with no error set
      if (session && session->peer_stop().stopped() && !is_own_error(original))
        raise_peer_stop(*session);
      throw original;
    }
    throw py::error_already_set();
  }
  if (program_call && unwritten_memory().any()) note_writes(args, kwargs);
  if (written_.index >= 0) forget_cached_statistics(written_buffer(written_, args, kwargs));
  return result;
}

void ApiHook::note_writes(py::handle args, py::handle kwargs) const {
  if (writes_first_arg_ && PyTuple_GET_SIZE(args.ptr()) > 0) {
    note_written(PyTuple_GET_ITEM(args.ptr(), 0));
  }
  if (kwargs) note_written(PyDict_GetItemString(kwargs.ptr(), "out"));  // borrowed, or null
  if (written_.index >= 0) note_written(written_buffer(written_, args, kwargs));
}

std::shared_ptr<ApiCounter> ApiCounter::of(const std::string& api) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::weak_ptr<ApiCounter>> counters;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<ApiCounter> counter = counters[api].lock();
  if (!counter) {
    counter = std::make_shared<ApiCounter>();
    counters[api] = counter;
  }
  return counter;
}

int64_t ApiHook::next_index(Session& session) {
  const uint64_t epoch = session.hooks().numbering.epoch();
  ApiCounter& c = *counter_;
  if (c.epoch.load(std::memory_order_acquire) != epoch) {
    std::lock_guard<std::mutex> lock(c.reset_mu);
    if (c.epoch.load(std::memory_order_relaxed) != epoch) {
      c.count.store(0, std::memory_order_relaxed);
      c.epoch.store(epoch, std::memory_order_release);
    }
  }
  return c.count.fetch_add(1, std::memory_order_relaxed);
}

namespace {

// The call ends for the selection also when it raises: a scope that ends at it must close.
struct EndOnExit {
  Selection& selection;
  const std::string& name;
  ~EndOnExit() { selection.end(name); }
};

}  // namespace

bool ApiHook::is_dropout(const std::string& api) {
  static const char* const kDropouts[] = {
      "Functional.dropout",           "Functional.dropout1d",     "Functional.dropout2d",
      "Functional.dropout3d",         "Functional.alpha_dropout", "Functional.feature_alpha_dropout",
      "Torch.dropout",                "Torch.dropout_",           "Torch.alpha_dropout",
      "Torch.alpha_dropout_",         "Torch.feature_alpha_dropout",
      "Torch.feature_alpha_dropout_", "Torch.feature_dropout",    "Torch.feature_dropout_"};
  for (const char* d : kDropouts) {
    if (api == d) return true;
  }
  return false;
}

bool ApiHook::dropout_p_is_zero(py::handle args, py::handle kwargs) {
  py::handle p;
  if (PyTuple_GET_SIZE(args.ptr()) >= 2) {
    p = PyTuple_GET_ITEM(args.ptr(), 1);
  } else if (kwargs) {
    p = PyDict_GetItemString(kwargs.ptr(), "p");  // borrowed
  }
  if (!p || !(PyFloat_Check(p.ptr()) || PyLong_Check(p.ptr()))) return false;  // 0.5 by default
  const double value = PyFloat_AsDouble(p.ptr());
  if (value == -1.0 && PythonCrossing::drop_error_if_set()) return false;
  return value == 0.0;
}

py::object ApiHook::call(py::handle args, py::handle kwargs) {
  PythonCrossing::assert_gil();
  std::shared_ptr<Session> session = current_session();
  // A peer's stop not raised here yet: the watcher thread may have ended this rank's step (the
  // gate closed) while a forward runs, and the rest of that forward must not use what the peer
  // sent (a sync-BN's NaN sums written into the running statistics).
  if (session && session->peer_stop().unraised() && !ReentryGuard::inside() &&
      !called_by_compiled_region())
    raise_peer_stop(*session);
  if (!session || !session->hooks().gate.forward() || ReentryGuard::inside() ||
      called_by_compiled_region()) {
    // A call the tool makes, or one inside a hooked call, is not the program's own: what it
    // writes is left to the version counter (UnwrittenMemory::holds).
    return call_original(args, kwargs, !ReentryGuard::inside());
  }
  if (session->peer_stop().stopped())
    raise_peer_stop(*session);  // another rank stopped: so does this
  ReentryGuard guard;
  // Named first, so that scope, list and data_mode are decided before any statistics: a call
  // that is filtered out costs a counter and a few string compares.
  const uint64_t epoch = session->hooks().numbering.epoch();
  // One allocation for the name; "<api>.<n>." is its prefix.
  const std::string index = std::to_string(next_index(*session));
  std::string name;
  name.reserve(api_.size() + index.size() + 10);
  name.append(api_).append(1, '.').append(index).append(".forward");
  if (!session->config().records_calls()) {  // task free_benchmark: checked, not recorded
    if (CallChecker* checker = session->hooks().call_checker) {
      auto run = [this](py::handle a, py::handle k) { return call_original(a, k, false); };
      return checker->call({api_, name, original_, run, py::reinterpret_borrow<py::tuple>(args),
                            kwargs ? py::reinterpret_borrow<py::dict>(kwargs) : py::dict()});
    }
    return call_original(args, kwargs, true);
  }
  Selection& selection = session->hooks().selection;
  // The backward name matters to the selection only through `list`.
  const Selected sel = selection.begin(
      name, selection.has_list() ? backward_name_of(name) : std::string(), inside_listed_module());
  if (!sel.any()) {
    EndOnExit end{selection, name};
    return call_original(args, kwargs, true);
  }
  return record(session, name, sel, epoch, args, kwargs);
}

void ApiHook::describe_inputs(StoredCall& call, LiveTensors* live, py::handle args,
                              py::handle kwargs, const EntryOptions& all_read,
                              bool limit_view_base) const {
  // A view call reads no value of the tensor it takes a view of: a large one is left unread, so
  // that 1,000 narrows of a 500-million-element bucket cost 1,000 views.
  EntryOptions limited;
  const bool limit = limit_view_base && view_of_first_arg_ && !all_read.saver;
  if (limit) {
    limited = all_read;
    limited.read_limit = kViewBaseReadLimit;
  }
  const EntryOptions& options = limit ? limited : all_read;
  const std::string& name = call.record.name;
  call.record.inputs =
      item_entries(args, options, options.stem(name, "input"), live ? &live->inputs : nullptr);
  call.record.kwargs = kwarg_entries(kwargs, options, name, live ? &live->kwargs : nullptr);
  mark_write_only_buffer(written_, call.record);
}

void ApiHook::mark_view_bases(StoredCall& call) const {
  // NaN/inf in a view was in the tensor it was taken of: its unread base is known to hold them
  // without a scan (a scan would cost the base's size at every narrow of an overflowed bucket).
  if (!holds_view_base(call.record)) return;
  bool nan = false, other = false;
  for (const Entry& out : call.record.outputs) {
    if (!holds_anomaly(out, false)) continue;
    for (const Scalar* s : {&out.max, &out.min, &out.mean, &out.norm}) {
      if (s->non_finite()) (std::isnan(s->number) ? nan : other) = true;
    }
  }
  if (!nan && !other) return;
  // Its Norm, the one statistic the view's values settle: NaN where the view holds NaN, else at
  // least infinite. Max, Min and Mean stay unread (null).
  const double norm = nan ? std::numeric_limits<double>::quiet_NaN()
                          : std::numeric_limits<double>::infinity();
  for (Entry& e : call.record.inputs)
    if (e.marks.view_base) e.norm = Scalar::of_float(norm);
  for (auto& kv : call.record.kwargs)
    if (kv.second.marks.view_base) kv.second.norm = Scalar::of_float(norm);
}

py::object ApiHook::record(const std::shared_ptr<Session>& owner, const std::string& name,
                           const Selected& sel, uint64_t epoch, py::handle args,
                           py::handle kwargs) {
  Session& session = *owner;
  // A collective's statistics are needed at once: whether its input was anomalous is told to the
  // other ranks before it runs.
  EntryOptions collective_options;
  if (written_.index >= 0) {
    collective_options = session.hooks().capture.options(name);
    collective_options.pending = nullptr;
  }
  const EntryOptions& options =
      written_.index >= 0 ? collective_options : session.hooks().capture.options(name);
  StoredCall call;
  call.epoch = epoch;
  call.record.name = name;
  call.record.has_inputs = sel.inputs;
  call.record.has_outputs = sel.outputs;
  std::vector<const torch::autograd::Node*> grad_fns_before;
  if (sel.backward && !session.hooks().format.backward_from_any_grad_fn) {
    for (const py::handle arg : py::reinterpret_borrow<py::tuple>(args))
      collect_grad_fns(arg, grad_fns_before, 0);
  }
  // The overflow guard traces anomalous entries back to their tensor objects.
  LiveTensors live;
  const bool watching = session.config().watching();
  if (sel.forward && sel.inputs)
    describe_inputs(call, watching ? &live : nullptr, args, kwargs, options, true);
  call.construct_only = sel.construct_only;
  if (!sel.construct_only) call.stack = session.hooks().codes.capture();
  call.parent = construct_parent();
  const std::string sent_key = watching ? sent_input_key(api_, args, kwargs) : std::string();
  const bool collective_input_anomaly =
      (written_.index >= 0 || !sent_key.empty()) && watching && holds_any_anomaly(call.record);
  if (collective_input_anomaly)
    mark_anomalous_collective_input(session, sent_key.empty() ? name : sent_key);

  py::object result;
  {
    EndOnExit end{session.hooks().selection, name};
    result = call_original(args, kwargs, true);
  }

  if (sel.backward && !(dropout_ && session.hooks().format.backward_from_any_grad_fn &&
                        dropout_p_is_zero(args, kwargs))) {
    if (auto fn = new_grad_fn(result, grad_fns_before)) {
      add_backward_recorder(fn, owner, backward_name_of(name), call.stack, sel, call.parent, epoch);
    }
  }
  if (!sel.forward) return result;
  // An in-place collective's result is in its buffer (when it ran synchronously: an async one's
  // buffer is not ready until its work is waited for).
  py::handle written = result.is_none() || written_.returns_source
                           ? written_buffer(written_, args, kwargs)
                           : py::handle();
  py::object outputs = written ? py::object(py::make_tuple(written)) : result;
  if (sel.outputs) {
    call.record.outputs = item_entries(outputs, options, options.stem(name, "output"),
                                       watching ? &live.outputs : nullptr);
  }
  if (watching && view_of_first_arg_ && sel.inputs && sel.outputs) mark_view_bases(call);
  if (written && watching && !collective_input_anomaly && holds_any_anomaly(call.record)) {
    const std::string key = written_.returns_source ? received_key(result) : name;
    if (!key.empty()) call.peer_rank = anomalous_collective_input_rank(session, key);
  }
  const CallArguments arguments{&name, original_, args, kwargs};
  CallArgumentsScope current(watching ? &arguments : current_call_arguments());
  submit(session, std::move(call), std::move(live));
  return result;
}

}  // namespace msprobe
