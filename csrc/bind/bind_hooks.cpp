// The hooks' side of _C: the API wrappers (api_hook_type), module hooks, and what the debugger's
// Python asks of the hooks' world (the current session, unhooked calls, the optimizer-step gate).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include "bind/api_hook_type.h"
#include "bind/bindings.h"
#include "core/fact_fields.h"
#include "live/crossing/dict_fields.h"
#include "live/capture/call_values.h"
#include "live/capture/unwritten_memory.h"
#include "live/hooks/compiled_region.h"
#include "live/hooks/hook_scope.h"
#include "live/hooks/module_hooks.h"
#include "live/overflow/model_tensors.h"
#include "live/overflow/python_side.h"
#include "live/session/session.h"

namespace py = pybind11;

namespace msprobe {

namespace {

// A stop's fields as Python sees them, and a peer stop built as a local one is.
void bind_stop_facts(py::module_& m) {
  // A peer stop is built here, as a local one is: one message format, one field list.
  auto peer_of = [](const py::dict& published) {
    return read_dict(peer_overflow_members(), published);
  };
  m.def(
      "peer_overflow_fields", [] { return keys_of(peer_overflow_members()); },
      "(key, Overflow attribute) of each field a rank publishes of its stop.");
  m.def(
      "overflow_field_names",
      [] {
        // Every optional field set, so that each is listed.
        OverflowFacts every;
        every.held = true;
        every.raised_calls_later = 1;
        every.history = HeadroomTrend{"torch.float16", {}, ""};
        every.replay.tried = true;
        std::vector<std::pair<std::optional<std::string>, std::optional<std::string>>> names;
        for (const FactField& f : fields_of(every)) {
          auto name = [](const char* n) {
            return n ? std::optional<std::string>(n) : std::nullopt;
          };
          if (f.json || f.attr) names.emplace_back(name(f.json), name(f.attr));
        }
        return names;
      },
      "(report key, attribute) of each field of a stop (core/fact_fields.h), None where a "
      "renderer has no place for it.");
  m.def(
      "peer_stop_line",
      [peer_of](const py::dict& published, int rank) {
        return peer_stop_line(peer_of(published), rank);
      },
      py::arg("published"), py::arg("rank"),
      "The line a rank says when it stops for another rank's published stop.");
  m.def(
      "peer_overflow_fields",
      [peer_of](const py::dict& published, int64_t step, int rank, const std::string& dump_dir,
                std::vector<std::string> gradients) {
        return overflow_fields(
            peer_stop_facts(peer_of(published), step, rank, dump_dir, std::move(gradients)));
      },
      py::arg("published"), py::arg("step"), py::arg("rank"), py::arg("dump_dir"),
      py::arg("gradients"),
      "Overflow's fields, message included, of this rank's stop for a peer's: the same list "
      "and message as a local stop's.");
}

}  // namespace

void bind_hooks(py::module_& m) {
  bind_stop_facts(m);
  m.def("set_current_session", &set_current_session, py::arg("session").none(true),
        "The session the hooks record into (None: none).");
  add_api_hook_type(m);
  m.def(
      "watch_compiling_flag",
      [](py::dict globals, py::str name) {
        PyUnicode_InternInPlace(&name.ptr());
        watch_compiling_flag(globals, name);
      },
      py::arg("globals"), py::arg("name"),
      "From now on, hooked calls made while globals[name] is True (torch.compile at work) go "
      "straight to the original.");
  m.def(
      "watch_compiled_runtime", &watch_compiled_runtime, py::arg("prefixes"), py::arg("fragments"),
      "From now on, hooked calls made from files that start with one of `prefixes` or contain one "
      "of `fragments` (torch.compile's run time) go straight to the original.");
  m.def("compiled_runtime_file", &compiled_runtime_file, py::arg("file"),
        "Whether code of `file` is a compiled region's run time (watch_compiled_runtime).");
  // Tensor methods need a descriptor to receive `self`; pybind11 callables are not descriptors.
  m.def(
      "as_method",
      [](py::object f) { return py::reinterpret_steal<py::object>(PyInstanceMethod_New(f.ptr())); },
      "`f` as an instance method, for a wrapper set on torch.Tensor.");
  m.def("module_hooks", &make_module_hooks, py::arg("qualname"), py::arg("class_name"),
        py::arg("record") = true, py::arg("dumped") = false,
        "The forward pre and post hooks of one module (module_hooks.h).");
  m.def("model_hooks", &make_model_hooks, py::arg("class_name"),
        "The hooks that judge what a started model returns.");
  // The debugger's own torch calls (a loss scaler's get_scale()) must not land in the dump.
  m.def(
      "call_unhooked",
      [](py::function fn) {
        ReentryGuard guard;
        return fn();
      },
      "fn(), with the hooks recording nothing.");
  m.def(
      "nonfinite_gradients",
      [](const std::vector<std::pair<std::string, at::Tensor>>& gradients) {
        ReentryGuard unhooked;
        return non_finite_gradients(gradients);
      },
      py::arg("gradients"),
      "The look at an optimizer step's tensors (OptimizerTensors): the names whose tensors hold "
      "NaN/inf.");
  m.def(
      "mark_unwritten",
      [](py::handle t) {
        if (THPVariable_Check(t.ptr())) unwritten_memory().mark(THPVariable_Unpack(t.ptr()));
      },
      py::arg("tensor"),
      "torch.empty and its kin, under task overflow_check: the tensor's memory is unwritten.");
  m.def(
      "note_written",
      [](py::handle t) {
        if (unwritten_memory().any() && !ReentryGuard::inside() && THPVariable_Check(t.ptr()))
          unwritten_memory().written(THPVariable_Unpack(t.ptr()));
      },
      py::arg("tensor"),
      "Tensor.copy_ and zero_, under task overflow_check: the tensor's elements are written.");
  m.def(
      "set_process_group_facts",
      [](py::object type, py::object facts) { set_process_group_facts(type, facts); },
      py::arg("type"), py::arg("facts"),
      "How a collective's process group is recorded (call_values.h).");
}

}  // namespace msprobe
