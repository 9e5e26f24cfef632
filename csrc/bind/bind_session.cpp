// _C.Session: what PrecisionDebugger (debugger.py) asks of one debugger's engine.
#include <pybind11/pybind11.h>

#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <nlohmann/json.hpp>

#include "bind/bindings.h"
#include "core/config.h"
#include "core/dump_format.h"
#include "core/step_rank_gate.h"
#include "live/crossing/dict_fields.h"
#include "live/capture/call_values.h"
#include "live/capture/held_data.h"
#include "live/capture/is_tensor.h"
#include "live/hooks/debug_save.h"
#include "live/hooks/hook_scope.h"
#include "live/overflow/optimizer_tensors.h"
#include "live/overflow/python_objects.h"
#include "live/overflow/python_side.h"
#include "live/session/overflow_control.h"
#include "live/session/session.h"
#include "live/crossing/python_crossing.h"

namespace py = pybind11;

namespace msprobe {
namespace {

std::shared_ptr<Session> make_session(const std::string& config_path,
                                      const std::string& overrides_json,
                                      const std::string& package_dir,
                                      const std::string& library_dir) {
  nlohmann::json overrides;
  try {
    overrides = nlohmann::json::parse(overrides_json);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(std::string("PrecisionDebugger: keyword arguments are not valid JSON: ") +
                      e.what());
  }
  const std::string source = config_path.empty() ? "PrecisionDebugger" : config_path;
  Config config = config_path.empty() ? parse_config(nlohmann::json::object(), source, overrides)
                                      : load_config_file(config_path, overrides);
  std::optional<ConfigWatch> dump_enable;
  if (!config_path.empty() && config.msprobe26.dump_enable)
    dump_enable.emplace(config_path, overrides, *config.msprobe26.dump_enable);
  auto session = std::make_shared<Session>(std::move(config), package_dir, source, library_dir,
                                           std::move(dump_enable));
  install_task_processor(session);
  return session;
}

// One call fills the whole PythonSide, by name (python_objects.h lists the names).
void set_python_side(Session& s, py::kwargs given) {
  PythonCrossing::assert_gil();
  auto side = std::make_unique<PythonSide>();
  size_t taken = 0;
  side->each([&](const char* name, py::object& member) {
    if (!given.contains(name)) return;
    member = given[name];
    ++taken;
  });
  if (taken != given.size()) {
    throw py::type_error("set_python_side: an unknown keyword among " +
                         py::str(given.attr("keys")()).cast<std::string>());
  }
  if (!side->overflow_type || !side->error_type || !side->on_flagged || !side->queue_callback) {
    throw py::type_error(
        "set_python_side: overflow_type, error_type, on_flagged and queue_callback are required");
  }
  s.guard().set_python_side(std::move(side));
}

// A started model's tensor as the hooks see it: a DTensor parameter by its shard (call_values).
at::Tensor model_tensor(py::handle tensor, const char* method) {
  if (!is_tensor(tensor)) throw py::type_error(std::string(method) + ": not a tensor");
  py::object held = held_tensor_object(tensor);
  return THPVariable_Unpack(held ? held.ptr() : tensor.ptr());
}

py::list headroom_sites(Session& s) {
  py::list out;
  for (const HeadroomRecord& r : s.guard().headroom_warned()) {
    py::list history;
    for (const HeadroomPoint& p : r.history) history.append(to_dict(headroom_point_members(), p));
    py::dict site;
    site["site"] = r.where;
    site["dtype"] = r.dtype;
    site["history"] = history;
    out.append(site);
  }
  return out;
}

// msprobe 26.x's start(scheduled_tokens=...): a dict of str to int > 0; anything else is
// ignored, as there.
ScheduledTokens scheduled_tokens_of(py::handle tokens) {
  if (!PyDict_Check(tokens.ptr())) return std::nullopt;
  std::vector<std::pair<std::string, int64_t>> list;
  for (auto kv : py::reinterpret_borrow<py::dict>(tokens)) {
    if (!PyUnicode_Check(kv.first.ptr()) || !PyLong_CheckExact(kv.second.ptr()) ||
        kv.second.cast<int64_t>() <= 0)
      return std::nullopt;
    list.emplace_back(kv.first.cast<std::string>(), kv.second.cast<int64_t>());
  }
  return list;
}

void bind_lifecycle(py::class_<Session, std::shared_ptr<Session>>& c) {
  c.def(py::init(&make_session), py::arg("config_path"), py::arg("overrides_json"),
        py::arg("package_dir"), py::arg("library_dir") = "",
        "Validates the config (ConfigError) and makes the engine; nothing is hooked yet.")
      .def(
          "start",
          [](Session& s, int rank, bool new_models, py::handle scheduled_tokens) {
            return s.start(rank, new_models, scheduled_tokens_of(scheduled_tokens));
          },
          py::arg("rank"), py::arg("new_models"), py::arg("scheduled_tokens") = py::none(),
          "Begins or resumes collection of the current step (rank -1: not distributed); "
          "whether it is the step's first start().")
      .def("stop_at_exit", &Session::stop_at_exit,
           "At exit: writes the step started last if stop() was not called for it.")
      .def_property_readonly("judges_optimizer", &Session::judges_optimizer,
                             "A step started and collected here: its optimizer step is judged.")
      .def(
          "first_time", [](Session& s, const std::string& what) { return s.said().first(what); },
          py::arg("what"), "True the first time the session is asked about `what`.")
      .def("stop", &stop_collecting, "Ends collection for now and writes the step's files.")
      .def("step", &end_step, "Writes the step if stop() did not, and moves to the next one.")
      .def(
          "pause", [](Session& s) { s.hooks().gate.pause(); },
          "forward_backward_dump_end: only the backward of the calls recorded so far.")
      .def("drain_writes", &Session::drain_writes,
           "async_dump: returns once every step handed over is on disk.")
      .def(
          "set_module_dump", [](Session& s, bool on) { s.hooks().gate.set_module_dump(on); },
          py::arg("on"), "module_dump(): only the dumped module's own hooks record.")
      .def_property_readonly(
          "task_processor", [](Session& s) { return s.hooks().processor; },
          "The processor of the task (GradMonitor, FreeBenchmark); None for the recording tasks.")
      .def_property_readonly(
          "finished",
          [](const Session& s) {
            return StepRankGate::of(s.config()).past_last_step(s.current_step());
          },
          "Past the last step the config lists.")
      .def_property_readonly(
          "collecting", [](Session& s) { return s.hooks().gate.forward(); },
          "Whether the hooks record forward calls now.")
      .def_property_readonly("current_step", &Session::current_step, "The step being collected.");
}

void bind_config(py::class_<Session, std::shared_ptr<Session>>& c) {
  c.def_property_readonly(
       "apis_hooked",
       [](const Session& s) { return s.config().level == Level::L1 || s.config().level == Level::Mix; },
       "Whether the level records API calls (L1, mix).")
      .def_property_readonly(
          "modules_hooked",
          [](const Session& s) {
            return s.config().level == Level::L0 || s.config().level == Level::Mix;
          },
          "Whether the level records module calls (L0, mix).")
      .def_property_readonly(
          "level", [](const Session& s) { return to_string(s.config().level); }, "L0, L1 or mix.")
      .def_property_readonly(
          "dump_path", [](const Session& s) { return s.config().dump_path; },
          "The dump folder, as configured.")
      .def_property_readonly(
          "extra_apis", [](const Session& s) { return s.config().extra_apis; },
          "APIs recorded besides the wrap list.")
      .def_property_readonly(
          "config_warnings", [](const Session& s) { return s.config().warnings; },
          "Accepted keys worth a word (deprecated ones), for the debugger to say.")
      .def_property_readonly(
          "watching", [](const Session& s) { return s.config().watching(); },
          "Task overflow_check.")
      .def_property_readonly(
          "wrap_list",
          [](Session& s) { return std::string(s.hooks().format.wrap_list); },
          "The wrap list's file in the package's _rules folder: msprobe 1.1.1's or 26.2.0's.")
      .def(
          "api_call_name",
          [](const Session& s, const std::string& prefix, const std::string& api) {
            return DumpFormat::of(s.config()).api_call_name(prefix, api);
          },
          py::arg("prefix"), py::arg("api"),
          "The name an API's calls are recorded under: Torch.linalg.norm, or Torch.norm (26.x).");
}

// What msprobe 26.x added to a run: the optimizer node of construct.json, level debug's save().
void bind_msprobe26(py::class_<Session, std::shared_ptr<Session>>& c) {
  c.def_property_readonly(
          "names_optimizer", [](Session& s) { return s.hooks().format.optimizer_node; },
          "construct.json names the optimizer's step as a node (msprobe 26.x, level mix).")
      .def(
          "optimizer_step_begins",
          [](Session& s) {
            if (s.hooks().format.optimizer_node) enter_region("optimizer");
          },
          "Before an optimizer step, on its thread: its API calls are the optimizer node's.")
      .def(
          "optimizer_step_ends", [](const Session&) { leave_region(); },
          "After an optimizer step, on its thread.")
      .def(
          "save",
          [](const std::shared_ptr<Session>& s, py::handle variable, py::handle name,
             py::handle save_backward, int rank) {
            save_debug_value(s, variable, name, save_backward, rank);
          },
          py::arg("variable"), py::arg("name"), py::arg("save_backward"), py::arg("rank"),
          "Level debug: PrecisionDebugger.save() (debug_save.h).");
}

// The task, what is said of it, and the statistics' counters.
void bind_run_facts(py::class_<Session, std::shared_ptr<Session>>& c) {
  c.def_property_readonly(
       "task", [](const Session& s) { return to_string(s.config().task); }, "The task.")
      .def_property_readonly(
          "dumps_calls", [](const Session& s) { return s.config().dumps_calls(); },
          "The task hooks calls and writes dumps (not grad_probe).")
      .def(
          "on_line",
          [](const Session& s, size_t apis, size_t modules) {
            return on_line(s.config(), apis, modules);
          },
          py::arg("apis"), py::arg("modules"),
          "The line said at the first start(): the task, the level, what is hooked, the dumps.")
      .def_property_readonly(
          "stats_cache_hits", [](Session& s) { return s.hooks().capture.stats_cache().hits(); },
          "Statistics reused for a tensor version already seen in the step.")
      .def_property_readonly(
          "stats_cache_misses", [](Session& s) { return s.hooks().capture.stats_cache().misses(); },
          "Statistics computed.")
      .def_property_readonly(
          "host_syncs", [](Session& s) { return s.hooks().capture.host_syncs(); },
          "Times this session's statistics waited for a device.");
}

void bind_guard(py::class_<Session, std::shared_ptr<Session>>& c) {
  c.def("set_python_side", &set_python_side,
        "The objects the guard hands findings to, by name (python_objects.h).")
      .def_property_readonly("headroom", &headroom_sites,
                             "The 16-bit call sites said to near their dtype's range.")
      .def(
          "add_model_tensor",
          [](Session& s, const std::string& name, py::handle tensor, bool buffer) {
            s.guard().add_model_tensor(name, model_tensor(tensor, "add_model_tensor"), buffer);
          },
          py::arg("name"), py::arg("tensor"), py::arg("buffer"),
          "A parameter (or buffer) of a started model, by its qualified name.")
      .def(
          "set_loss_scaled", [](Session& s, double before) { s.guard().set_loss_scaled(before); },
          py::arg("before"),
          "A loss scaler scaled this step's loss from scale `before`: its backward findings "
          "wait for step().")
      .def(
          "parameter_names",
          [](Session& s, const std::vector<py::handle>& tensors) {
            std::vector<at::Tensor> unpacked;
            for (py::handle t : tensors) unpacked.push_back(model_tensor(t, "parameter_names"));
            return s.guard().parameter_names(unpacked);
          },
          py::arg("tensors"),
          "The started models' names of these parameters (None for a tensor that is none).")
      .def("mark_compiled_outputs", &mark_compiled_outputs, py::arg("output"),
           "The tensors a torch.compile'd model returned.");
}

// The looks at a loss scaler's and an optimizer's step: decided in session/overflow_control.h,
// carried out (a notice, a stop raised) by the crossing's handle_event.
void bind_step_looks(py::class_<Session, std::shared_ptr<Session>>& c) {
  c.def(
       "judge_loss_scale",
       [](Session& s, double after, bool skipped) {
         handle_event(s, judge_loss_scale(s, after, skipped));
       },
       py::arg("after"), py::arg("skipped") = false,
       "At step(): the scale now, against the one at set_loss_scaled(), and whether the "
       "scaler says it skipped the step; a scale that fell too low stops.")
      .def(
          "judge_optimizer_settings",
          [](Session& s, const std::string& optimizer,
             std::vector<std::pair<std::string, double>> settings) {
            handle_event(s, judge_optimizer_settings(s, optimizer, std::move(settings)));
          },
          py::arg("optimizer"), py::arg("settings"),
          "Before an optimizer step: its numeric settings ((\"lr of param_groups[0]\", value)).")
      .def(
          "judge_optimizer_gradients",
          [](Session& s, const std::string& optimizer, const NamedTensors& bad, bool reduced) {
            handle_event(s, judge_optimizer_gradients(s, optimizer, bad, reduced));
          },
          py::arg("optimizer"), py::arg("bad"), py::arg("reduced"),
          "Before an optimizer step: (parameter name, gradient) of those that hold NaN/inf.")
      .def(
          "judge_optimizer_state",
          [](Session& s, const std::string& optimizer, const std::string& state,
             const std::string& parameter, size_t more) {
            handle_event(s, judge_optimizer_state(s, optimizer, state, parameter, more));
          },
          py::arg("optimizer"), py::arg("state"), py::arg("parameter"), py::arg("more"),
          "Before an optimizer step: its state of `parameter` holds NaN/inf (and `more` others).")
      .def(
          "optimizer_tensors",
          [](Session& s, py::handle optimizer, bool started) {
            return std::make_shared<OptimizerTensors>(s, optimizer, started);
          },
          py::arg("optimizer"), py::arg("started"),
          "An optimizer's parameters, named (`started`: as the started models name them), for "
          "the looks before and after its step (OptimizerTensors).")
      .def("begin_optimizer_step", &begin_optimizer_step, py::arg("runs_closure"),
           "Before an optimizer step: whether its calls are left to the look after it.")
      .def("end_optimizer_step", &end_optimizer_step,
           "After an optimizer step: whether its calls were left, so the look is due.")
      .def(
          "judge_optimizer_update",
          [](Session& s, const std::string& optimizer, const NamedTensors& bad) {
            handle_event(s, judge_optimizer_update(s, optimizer, bad));
          },
          py::arg("optimizer"), py::arg("bad"),
          "After an optimizer step whose calls were left: (name, tensor) of what holds NaN/inf now.");
}

// torch.distributed: another rank's stop, as the watcher thread hands it over.
void bind_peer_stop(py::class_<Session, std::shared_ptr<Session>>& c) {
  c.def(
       "set_peer_stopped",
       [](Session& s, bool own) {
         s.peer_stop().set();
         if (own) s.peer_stop().mark_raised();
       },
       py::arg("own") = false,
       "Another rank stopped (the watcher thread): the hooks raise its stop; `own`: a stop this "
       "rank raises itself (its own, or the peer's raised by PeerStop.raise_now).")
      .def(
          "stop_for_peer",
          [](Session& s, const py::dict& published) {
            return stop_for_peer(s, read_dict(peer_overflow_members(), published));
          },
          py::arg("published"),
          "Writes this rank's step for a peer's published stop (peer_overflow_fields) and ends "
          "it; the folder, or \"\".");
}

}  // namespace

// What the looks around an optimizer's step read (live/overflow/optimizer_tensors.h).
void bind_optimizer_tensors(py::module_& m) {
  py::class_<OptimizerTensors, std::shared_ptr<OptimizerTensors>>(
      m, "OptimizerTensors", "An optimizer's tensors, as the looks around its step read them.")
      .def("nonfinite_gradients", &OptimizerTensors::nonfinite_gradients,
           "Before the step: (name, gradient) of the gradients that hold NaN/inf.")
      .def("nonfinite_state", &OptimizerTensors::nonfinite_state,
           "Before the step: (key, parameter) of the state that holds NaN/inf.")
      .def("nonfinite_written", &OptimizerTensors::nonfinite_written,
           "After the step: (name, tensor) of the updated parameters and the state that hold "
           "NaN/inf (\"exp_avg of fc.weight\").")
      .def("of", &OptimizerTensors::of, py::arg("optimizer"), "Whether these are `optimizer`'s.");
}

void bind_session(py::module_& m) {
  bind_optimizer_tensors(m);
  py::class_<Session, std::shared_ptr<Session>> c(
      m, "Session",
      "One debugger's engine: the config, the step's records, the guard, the writer.");
  bind_lifecycle(c);
  bind_config(c);
  bind_run_facts(c);
  bind_msprobe26(c);
  bind_guard(c);
  bind_step_looks(c);
  bind_peer_stop(c);
}

}  // namespace msprobe
