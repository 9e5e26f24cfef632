// msprobe's in-process tasks besides the dump: _C.GradMonitor (task grad_probe) and
// _C.FreeBenchmark (task free_benchmark).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>

#include "bind/bindings.h"
#include "live/crossing/python_crossing.h"
#include "live/free_benchmark/free_benchmark.h"
#include "live/grad_probe/grad_monitor.h"
#include "live/hooks/hook_scope.h"
#include "live/session/session.h"

namespace py = pybind11;

namespace msprobe {

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
}

}  // namespace msprobe
