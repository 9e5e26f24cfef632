// msprobe_cpp_units: the test extension (built beside the package, never in it: pip builds _C
// alone). Test hooks that drive the live parts on their own, with no session and no training
// loop (tests/python/test_live_units.py): OverflowWatch judging calls made of real tensors,
// StepWriter writing a finished step, DeferredCalls queueing and handing back calls. It links the
// same engine objects as _C (cmake/torch_extension.cmake); import torch first.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <nlohmann/json.hpp>

#include "core/config.h"
#include "core/step_folders.h"
#include "live/capture/call_values.h"
#include "live/crossing/python_crossing.h"
#include "live/log/tool_log.h"
#include "live/monitor/monitor_stats.h"
#include "live/overflow/model_tensors.h"
#include "live/overflow/overflow_watch.h"
#include "live/stats/stats_cache.h"
#include "live/session/deferred_calls.h"
#include "live/session/overflow_guard.h"
#include "live/session/step_writer.h"

namespace py = pybind11;

namespace msprobe {
namespace {

// A config of `overrides_json`; its dump_path is never written (nothing here writes by it).
Config config_of(const std::string& overrides_json) {
  nlohmann::json overrides = nlohmann::json::parse(overrides_json);
  overrides.emplace("dump_path", "unused");
  return parse_config(nlohmann::json::object(), "_units", overrides);
}

// A call record of `inputs` and `outputs` (each a tuple or one value), statistics on the host,
// with its live tensors.
CallRecord record_of(const std::string& name, py::handle inputs, py::handle outputs,
                     LiveTensors& live) {
  const EntryOptions options;
  CallRecord rec;
  rec.name = name;
  rec.inputs = item_entries(inputs.ptr(), options, "", &live.inputs);
  rec.outputs = item_entries(outputs.ptr(), options, "", &live.outputs);
  return rec;
}

// An OverflowWatch with the started models' tensors it reads.
class WatchUnderTest {
 public:
  explicit WatchUnderTest(const std::string& overrides_json)
      : config_(config_of(overrides_json)), watch_(config_, models_) {}
  void add_model_tensor(const std::string& name, const at::Tensor& t) {
    models_.add(name, t, false);
  }
  void new_step() {
    models_.new_step();
    watch_.new_step();
  }
  py::dict judge(const std::string& name, py::handle inputs, py::handle outputs) {
    LiveTensors live;
    const CallRecord rec = record_of(name, inputs, outputs, live);
    const Verdict v = watch_.judge(rec, live, std::nullopt);
    py::dict out;
    out["flagged"] = v.flagged;
    out["stop"] = v.stop;
    out["origin"] = v.origin ? py::object(py::str(to_string(*v.origin))) : py::none();
    out["parameter"] = v.parameter ? py::object(py::str(*v.parameter)) : py::none();
    out["finding"] = v.finding ? py::object(py::str(v.finding->call)) : py::none();
    return out;
  }
  bool step_flagged() const { return watch_.step_flagged(); }

 private:
  Config config_;
  ModelTensors models_;
  OverflowWatch watch_;
};

// What the guard's decisions say, as a dict; None for no event.
py::object event_dict(const std::optional<OverflowEvent>& e) {
  if (!e) return py::none();
  py::dict out;
  out["notify"] = e->notify;
  out["raise"] = e->raise;
  out["call"] = e->facts.finding.call;
  out["origin"] = e->facts.origin ? py::object(py::str(to_string(*e->facts.origin))) : py::none();
  return out;
}

// An OverflowGuard as the session holds it, with the paths, code registry and step tickets it
// reads; calls judged as the session hands them over (numbered by the current step's epoch unless
// told otherwise). new_step() publishes the next ticket, as the session's end of a step does.
class GuardUnderTest {
 public:
  explicit GuardUnderTest(const std::string& overrides_json)
      : config_(config_of(overrides_json)), guard_(config_, paths_, codes_, "_units", tickets_) {
    guard_.begin_step(true);
  }
  void new_step(int64_t step) {
    tickets_.publish(StepTicket{step, -1, static_cast<uint64_t>(step) + 1});
    guard_.begin_step(true);
  }
  void add_model_tensor(const std::string& name, const at::Tensor& t) {
    guard_.add_model_tensor(name, t, false);
  }
  // `stale`: numbered by the step before (a call still running when its step ended).
  py::dict judge(const std::string& name, py::handle inputs, py::handle outputs, bool stale) {
    LiveTensors live;
    StoredCall call;
    call.record = record_of(name, inputs, outputs, live);
    const uint64_t epoch = tickets_.epoch();
    call.epoch = stale ? epoch - 1 : epoch;
    const CallVerdict v = guard_.judge_call(call, live);
    py::dict out;
    out["dropped"] = v.dropped;
    out["keep_tensors"] = v.keep_tensors;
    out["event"] = event_dict(v.event);
    return out;
  }
  py::dict end_step(bool calls_due, bool at_stop) {
    GuardStepEnd end = guard_.end_step(calls_due, at_stop, std::nullopt);
    py::dict out;
    out["closed"] = end.closed;
    out["write"] = end.write;
    out["said"] = end.said;
    out["judgements"] = end.judgements.size();
    return out;
  }
  void set_loss_scaled(double before) { guard_.set_loss_scaled(before); }
  py::object judge_loss_scale(double after, bool skipped) {
    return event_dict(guard_.judge_loss_scale(after, skipped));
  }
  bool step_flagged() const { return guard_.step_flagged(); }

 private:
  Config config_;
  SessionPaths paths_{"", "", "/nonexistent/_units", "rank"};  // nothing is written here
  CodeRegistry codes_;
  StepTickets tickets_{StepTicket{0, -1, 1}};
  OverflowGuard guard_;
};

// The statistics cache, a tensor's cached statistics told apart by their md5 field.
class CacheUnderTest {
 public:
  static bool cacheable(const at::Tensor& t) { return StatsCache::cacheable(t); }
  void put(const at::Tensor& t, const std::string& tag) {
    DataStats s;
    s.md5 = tag;
    cache_.put(t, s);
  }
  std::optional<std::string> find(const at::Tensor& t) {
    const std::optional<DataStats> s = cache_.find(t);
    return s ? std::optional<std::string>(s->md5) : std::nullopt;
  }
  void clear() { cache_.clear(); }
  void written_without_version(const at::Tensor& t) { cache_.written_without_version(t); }
  // The session's step moves on: the cache lets the last step's statistics go at its next look.
  void next_step() {
    const StepTicket now = tickets_.current();
    tickets_.publish(StepTicket{now.step + 1, now.rank, now.epoch + 1});
  }
  std::pair<int64_t, int64_t> hits_misses() const { return {cache_.hits(), cache_.misses()}; }

 private:
  StepTickets tickets_{StepTicket{0, -1, 1}};
  StatsCache cache_{&tickets_};
};

StoredCall named_call(const std::string& name) {
  StoredCall c;
  c.record.name = name;
  return c;
}

// Writes a step of calls named `names` under `dump_path` as the session would hand it over;
// returns the writer's error ("" when written) and the folder.
std::pair<std::string, std::string> write_step(const std::string& dump_path, int64_t step, int rank,
                                               const std::vector<std::string>& names) {
  StepWriter writer(dump_path, dump_path, "statistics", "L1", DumpFormat{}, nullptr);
  FinishedStep f;
  f.step = step;
  f.rank = rank;
  f.folder = step_folder(step, rank);
  f.dir = dump_path + "/" + f.folder;
  f.staging = staging_folder(dump_path, f.folder);
  for (const std::string& n : names) f.calls.push_back(named_call(n));
  f.stacks.resize(f.calls.size());
  std::string error;
  {
    PythonCrossing::NoGil no_gil;  // as the session writes: no GIL
    error = writer.write(f);
  }
  deliver_said_lines();  // the writer's, with the GIL back, as the session delivers them
  return {error, f.dir};
}

// Queues calls named `names` under overflow_check.sync `sync`; returns, per call, whether the
// queue was then due, and the names handed back by take(), in order.
std::pair<std::vector<bool>, std::vector<std::string>> defer_calls(
    const std::string& sync, int64_t batch_calls, const std::vector<std::string>& names) {
  const Config config = config_of(
      nlohmann::json{{"task", "overflow_check"}, {"sync", sync}, {"sync_batch_calls", batch_calls}}
          .dump());
  DeferredCalls queue(config.overflow_check, nullptr);
  std::vector<bool> due;
  for (const std::string& n : names)
    due.push_back(queue.defer(DeferredCall{named_call(n), {}, {}}));
  std::vector<std::string> taken;
  for (DeferredCall& c : queue.take()) taken.push_back(c.call.record.name);
  return {due, taken};
}

// The training monitor's values of `tensor` for msprobe's op names, as the Python values its
// DataFrame gets: int, float, str, or None. exact_sums: MonitorMetrics'.
py::list monitor_values_of(const at::Tensor& tensor, const std::vector<std::string>& ops,
                           double eps, bool exact_sums) {
  const MonitorConfig config = parse_monitor_config({{"ops", ops}}, "_units");
  py::list out;
  for (const MonitorValue& v : monitor_values(tensor, {config.output.ops, eps, exact_sums})) {
    switch (v.kind) {
      case MonitorValue::Kind::Missing: out.append(py::none()); break;
      case MonitorValue::Kind::Integer: out.append(py::int_(v.integer)); break;
      case MonitorValue::Kind::Real: out.append(py::float_(v.real)); break;
      case MonitorValue::Kind::Text: out.append(py::str(v.text)); break;
    }
  }
  return out;
}

}  // namespace

void bind_units(py::module_& units) {
  py::class_<WatchUnderTest>(units, "Watch", "An OverflowWatch with its own started-model tensors.")
      .def(py::init<const std::string&>(), py::arg("overrides_json"))
      .def("add_model_tensor", &WatchUnderTest::add_model_tensor, py::arg("name"),
           py::arg("tensor"))
      .def("new_step", &WatchUnderTest::new_step)
      .def("judge", &WatchUnderTest::judge, py::arg("name"), py::arg("inputs"), py::arg("outputs"))
      .def_property_readonly("step_flagged", &WatchUnderTest::step_flagged);
  py::class_<GuardUnderTest>(units, "Guard", "An OverflowGuard judging calls as a session would.")
      .def(py::init<const std::string&>(), py::arg("overrides_json"))
      .def("new_step", &GuardUnderTest::new_step, py::arg("step"))
      .def("add_model_tensor", &GuardUnderTest::add_model_tensor, py::arg("name"),
           py::arg("tensor"))
      .def("judge", &GuardUnderTest::judge, py::arg("name"), py::arg("inputs"), py::arg("outputs"),
           py::arg("stale") = false)
      .def("end_step", &GuardUnderTest::end_step, py::arg("calls_due"), py::arg("at_stop"))
      .def("set_loss_scaled", &GuardUnderTest::set_loss_scaled, py::arg("before"))
      .def("judge_loss_scale", &GuardUnderTest::judge_loss_scale, py::arg("after"),
           py::arg("skipped"))
      .def_property_readonly("step_flagged", &GuardUnderTest::step_flagged);
  py::class_<CacheUnderTest>(units, "StatsCache", "The per-version statistics cache.")
      .def(py::init<>())
      .def_static("cacheable", &CacheUnderTest::cacheable, py::arg("tensor"))
      .def("put", &CacheUnderTest::put, py::arg("tensor"), py::arg("tag"))
      .def("find", &CacheUnderTest::find, py::arg("tensor"))
      .def("clear", &CacheUnderTest::clear)
      .def("written_without_version", &CacheUnderTest::written_without_version, py::arg("tensor"))
      .def("next_step", &CacheUnderTest::next_step)
      .def_property_readonly("hits_misses", &CacheUnderTest::hits_misses);
  units.def("write_step", &write_step, py::arg("dump_path"), py::arg("step"), py::arg("rank"),
            py::arg("names"));
  units.def("defer_calls", &defer_calls, py::arg("sync"), py::arg("batch_calls"), py::arg("names"));
  units.def("monitor_values", &monitor_values_of, py::arg("tensor"), py::arg("ops"),
            py::arg("eps") = 1e-8, py::arg("exact_sums") = true);
}

}  // namespace msprobe

PYBIND11_MODULE(msprobe_cpp_units, m) {
  m.doc() = "Test hooks: msprobe_cpp's live parts driven on their own.";
  msprobe::bind_units(m);
}
