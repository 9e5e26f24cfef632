#include "torch/overflow_raise.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

namespace py = pybind11;

namespace msprobe {

namespace {

std::string message_of(const OverflowStop& s) {
  const Finding& f = s.finding;
  std::string m = "msprobe_cpp: overflow at step " + std::to_string(s.step);
  if (s.rank >= 0) m += ", rank " + std::to_string(s.rank);
  m += ": " + f.call + " (" + to_string(f.severity) + ", " + scene_name(f.scene) + ")";
  m += "\n  module: " + (s.module ? *s.module : std::string("(none recorded)"));
  m += "\n  source: " + (s.source ? *s.source : std::string("(no Python frame)"));
  for (const std::string& t : s.tensors) m += "\n  " + t;
  m += "\n  dump:   " + s.dump_dir + "  (overflow_report.json, dump.json, dump_tensor_data/)";
  return m;
}

}  // namespace

void raise_overflow(Session& session, const OverflowStop& stop) {
  session.end_with_overflow();
  // The hooks go before the exception reaches the user, so the process is healthy again.
  py::module_::import("msprobe_cpp.debugger").attr("_release_after_stop")();

  const Finding& f = stop.finding;
  py::dict facts;
  facts["step"] = stop.step;
  facts["rank"] = stop.rank;
  facts["call"] = f.call;
  facts["scene"] = scene_name(f.scene);
  facts["level"] = to_string(f.severity);
  facts["input_args_anomaly_indices"] = f.input_indices;
  facts["input_kwargs_anomaly_keys"] = f.kwarg_keys;
  facts["output_anomaly_indices"] = f.output_indices;
  facts["module"] = stop.module ? py::object(py::str(*stop.module)) : py::object(py::none());
  facts["source"] = stop.source ? py::object(py::str(*stop.source)) : py::object(py::none());
  facts["dump_dir"] = stop.dump_dir;
  facts["tensors"] = stop.tensors;
  py::object type = py::module_::import("msprobe_cpp.errors").attr("OverflowError");
  py::object error = type(message_of(stop), **facts);
  PyErr_SetObject(type.ptr(), error.ptr());
  throw py::error_already_set();
}

}  // namespace msprobe
