// _C._units: test hooks that drive the live parts on their own, with no session and no training
// loop (tests/python/test_live_units.py): OverflowWatch judging calls made of real tensors,
// StepWriter writing a finished step, DeferredCalls queueing and handing back calls.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <nlohmann/json.hpp>

#include "bind/bindings.h"
#include "core/config.h"
#include "core/step_folders.h"
#include "live/capture/call_values.h"
#include "live/crossing/python_crossing.h"
#include "live/log/tool_log.h"
#include "live/overflow/model_tensors.h"
#include "live/overflow/overflow_watch.h"
#include "live/session/deferred_calls.h"
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

}  // namespace

void bind_units(py::module_& m) {
  py::module_ units = m.def_submodule("_units", "Test hooks: the live parts driven on their own.");
  py::class_<WatchUnderTest>(units, "Watch", "An OverflowWatch with its own started-model tensors.")
      .def(py::init<const std::string&>(), py::arg("overrides_json"))
      .def("add_model_tensor", &WatchUnderTest::add_model_tensor, py::arg("name"),
           py::arg("tensor"))
      .def("new_step", &WatchUnderTest::new_step)
      .def("judge", &WatchUnderTest::judge, py::arg("name"), py::arg("inputs"), py::arg("outputs"))
      .def_property_readonly("step_flagged", &WatchUnderTest::step_flagged);
  units.def("write_step", &write_step, py::arg("dump_path"), py::arg("step"), py::arg("rank"),
            py::arg("names"));
  units.def("defer_calls", &defer_calls, py::arg("sync"), py::arg("batch_calls"), py::arg("names"));
}

}  // namespace msprobe
