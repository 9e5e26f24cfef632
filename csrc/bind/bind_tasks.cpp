// msprobe's in-process tasks besides the dump: _C.GradMonitor (task grad_probe),
// _C.FreeBenchmark (task free_benchmark) and _C.TrainerMonitor (TrainerMon's task monitor).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>

#include "bind/bindings.h"
#include "live/crossing/python_crossing.h"
#include "live/free_benchmark/free_benchmark.h"
#include "live/grad_probe/grad_monitor.h"
#include "live/hooks/hook_scope.h"
#include "live/monitor/monitor_switch.h"
#include "live/monitor/trainer_monitor.h"
#include "live/session/session.h"

namespace py = pybind11;

namespace msprobe {
namespace {

// [(name, param, grad or None, in the optimizer's state, exp_avg or None, exp_avg_sq or None)].
std::vector<StepParameter> step_parameters(const std::vector<py::tuple>& items) {
  const auto tensor = [](py::handle h) {
    return h.is_none() ? at::Tensor() : h.cast<at::Tensor>();
  };
  std::vector<StepParameter> params;
  params.reserve(items.size());
  for (const py::tuple& item : items) {
    params.push_back({item[0].cast<std::string>(), tensor(item[1]), tensor(item[2]),
                      item[3].cast<bool>(), tensor(item[4]), tensor(item[5])});
  }
  return params;
}

// TrainerMon's session: its config file read (ConfigError), its processor made.
std::shared_ptr<Session> monitor_session(const std::string& config_path,
                                         const std::string& output_root,
                                         const std::string& package_dir) {
  auto session = std::make_shared<Session>(load_monitor_config_file(config_path, output_root),
                                           package_dir, config_path);
  install_task_processor(session);
  return session;
}

// What TrainerMon drives beside its processor: dynamic_on's switch, cc_distribution's wrappers.
void bind_monitor_parts(py::module_& m) {
  py::class_<MonitorCollectives, std::shared_ptr<MonitorCollectives>>(
      m, "MonitorCollectives", "cc_distribution: the monitor's wrappers of the collectives.")
      .def_property_readonly_static(
          "wrapped_names", [](py::object) { return MonitorCollectives::wrapped_names(); },
          "The torch.distributed functions msprobe wraps.")
      .def("wrapper", &MonitorCollectives::wrapper, py::arg("name"), py::arg("original"),
           "The wrapper of collective <name>, calling <original>.")
      .def("wait_wrapper", &MonitorCollectives::wait_wrapper, py::arg("original"),
           py::arg("work_class"), "The wrapper of Work.wait, a method of <work_class>.");
  py::class_<MonitorSwitch>(m, "MonitorSwitch",
                            "dynamic_on: when TrainerMon's config file turns the monitor on.")
      .def(py::init<std::string, std::string>(), py::arg("config_path"), py::arg("output_root"))
      .def("poll", &MonitorSwitch::poll,
           "After a step: the file changed and says dynamic_on with a valid config.")
      .def("finish", &MonitorSwitch::finish, "Writes dynamic_on: false back into the file.");
  m.def("monitor_session", &monitor_session, py::arg("config_path"), py::arg("output_root"),
        py::arg("package_dir"),
        "TrainerMon's session: its config validated (ConfigError); its processor is its "
        "task_processor.");
}

// The step wrapper's calls, in their order at each optimizer step.
void bind_monitor_steps(py::class_<TrainerMonitor, TaskProcessor, std::shared_ptr<TrainerMonitor>>& c) {
  c.def(
       "step_reads",
       [](const TrainerMonitor& t) {
         const TrainerMonitor::StepReads r = t.step_reads();
         return py::make_tuple(r.collects, r.grads, r.moments, r.after_step);
       },
       "(collects, grads, moments, after_step): whether this step is written; whether "
       "before_step reads the gradients and the optimizer's moments; whether to call after_step.")
      .def(
          "before_step",
          [](TrainerMonitor& t, const std::vector<py::tuple>& params, bool has_state) {
            ReentryGuard unhooked;
            t.before_step(step_parameters(params), has_state);
          },
          py::arg("params"), py::arg("optimizer_has_state"),
          "Before the optimizer's step: [(name, param, grad, in_state, exp_avg, exp_avg_sq)].")
      .def(
          "after_step",
          [](TrainerMonitor& t, const std::vector<py::tuple>& params) {
            ReentryGuard unhooked;
            t.after_step(step_parameters(params));
          },
          py::arg("params"), "After the optimizer's step: the same list.")
      .def("end_step", &TrainerMonitor::end_step, "The step's files handed over; the next step.")
      .def_property_readonly("finished", &TrainerMonitor::finished,
                             "collect_times steps were written.")
      .def_property_readonly("run_folder", &TrainerMonitor::run_folder,
                             "<output root>/<time>-rank<R>-<id>, or \"\" where nothing is written.")
      .def(
          "drain",
          [](TrainerMonitor& t) {
            PythonCrossing::WithoutGil waits;  // for the write thread, which never takes it
            t.drain();
          },
          "Returns once every step handed over is on disk.");
}

void bind_monitor(py::module_& m) {
  bind_monitor_parts(m);
  py::class_<TrainerMonitor, TaskProcessor, std::shared_ptr<TrainerMonitor>> monitor(
      m, "TrainerMonitor", "TrainerMon: msprobe's training monitor, step by step.");
  monitor
      .def("begin", &TrainerMonitor::begin, py::arg("first_step"), py::arg("rank"),
           py::arg("micro_steps"), py::arg("starts_now") = false, py::arg("run_folder") = "",
           "set_monitor(): the first step's number, this rank (-1: not distributed), "
           "grad_acc_steps; dynamic_on: writing from the first step, into the run's folder.")
      .def("place", &TrainerMonitor::place, py::arg("pp_stage"), py::arg("group_mates"),
           py::arg("module_classes"),
           "anomaly.json's pp_stage and group_mates; each module's class by \"<vpp>:<name>\".")
      .def("set_has_peers", &TrainerMonitor::set_has_peers, py::arg("peers"),
           "torch.distributed has more than one rank: no tensor's values are reused between "
           "slots (an in-place collective bumps no version).")
      .def("parameter_tag", &TrainerMonitor::parameter_tag, py::arg("vpp_stage"),
           py::arg("name"), "The parameter's tag if the targets take it, else None.")
      .def("module_tag", &TrainerMonitor::module_tag, py::arg("vpp_stage"), py::arg("name"),
           "The module's tag if xy_distribution watches it, else None.")
      .def("module_hooks", &TrainerMonitor::module_hooks, py::arg("tag"),
           "(pre_hook, forward_hook) of watched module \"<vpp>:<name>\", with_kwargs=True.")
      .def(
          "watch",
          [](TrainerMonitor& t, const std::vector<std::pair<std::string, at::Tensor>>& params) {
            t.watch(params);
          },
          py::arg("params"), "The watched [(\"<vpp>:<name>\", parameter)], in the model's order.")
      .def(
          "unreduced",
          [](TrainerMonitor& t, const std::string& tag, const at::Tensor& grad) {
            ReentryGuard unhooked;  // the statistics' own ATen calls are not the program's
            t.unreduced(tag, grad);
          },
          py::arg("tag"), py::arg("grad"),
          "A watched parameter's gradient as its rank hands it to FSDP2's reduce-scatter.")
      .def("stack_hook", &TrainerMonitor::stack_hook, py::arg("vpp_stage"), py::arg("name"),
           "stack_info: the forward hook recording module <name>'s call stack, else None.")
      .def_property_readonly("stacks_pending", &TrainerMonitor::stacks_pending,
                             "stack_info.csv is still to be written.")
      .def("stops_run", &TrainerMonitor::stops_run,
           "At an optimizer step: the text of msprobe's exception that ends the run "
           "(print_struct, cc_log_only), else \"\".")
      .def_property_readonly("collectives", &TrainerMonitor::collectives,
                             "cc_distribution's wrappers of the collectives, else None.");
  bind_monitor_steps(monitor);
}

}  // namespace

void bind_tasks(py::module_& m) {
  // Made by the session (task_registry.cpp) and reached as Session.task_processor, as the
  // class of its task.
  py::class_<TaskProcessor, std::shared_ptr<TaskProcessor>>(
      m, "TaskProcessor", "The processor of a task with work of its own (grad_probe, ...).");
  py::class_<GradMonitor, TaskProcessor, std::shared_ptr<GradMonitor>>(
      m, "GradMonitor", "Task grad_probe: the summary of each optimizer step's gradients.")
      .def("watches", &GradMonitor::watches, py::arg("name"), "grad_probe.param_list names it.")
      .def("writes_rank", &GradMonitor::writes_rank, py::arg("rank"),
           "The config's rank list names this rank (-1: not distributed).")
      .def("next_step", &GradMonitor::next_step,
           "An optimizer is about to step: counts it; whether its gradients are summarized.")
      .def_property_readonly("step", &GradMonitor::step, "The last optimizer step counted.")
      .def(
          "summarize",
          [](GradMonitor& g, int rank, const std::vector<py::tuple>& grads, bool optimizer_writes) {
            ReentryGuard unhooked;
            std::vector<NamedGrad> named;
            named.reserve(grads.size());
            for (const py::tuple& item : grads) {
              NamedGrad n{item[0].cast<std::string>(), {}, {}, {}};
              if (!item[1].is_none()) n.grad = item[1].cast<at::Tensor>();
              if (item.size() > 3 && !item[2].is_none()) {
                n.global_shape = item[2].cast<std::vector<int64_t>>();
                n.placements = item[3].cast<std::string>();
              }
              named.push_back(std::move(n));
            }
            g.summarize(rank, named, optimizer_writes);
          },
          py::arg("rank"), py::arg("grads"), py::arg("optimizer_writes") = false,
          "Writes this step's summary of [(name, gradient or None[, global shape, placements])] "
          "(a thread writes the files).")
      .def(
          "step_done",
          [](GradMonitor& g) {
            PythonCrossing::WithoutGil waits;  // for the read thread, which never takes it
            g.step_done();
          },
          "The optimizer step is over: returns once its gradients are read.")
      .def("drain", &GradMonitor::drain, "Returns once every summary handed over is on disk.");

  py::class_<FreeBenchmark, TaskProcessor, std::shared_ptr<FreeBenchmark>>(
      m, "FreeBenchmark", "Task free_benchmark: each selected API call run again and compared.");
  bind_monitor(m);
}

}  // namespace msprobe
