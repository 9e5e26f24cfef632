// The tool's services in _C: its lines (to msprobe_cpp/log.py), the command line and the check
// report, the wrap list, call names; and the hooks tests and benches reach in with.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <iostream>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "bind/bindings.h"
#include "cli/check_command.h"
#include "cli/cli.h"
#include "core/output_files.h"
#include "core/record.h"
#include "core/rules.h"
#include "live/crossing/python_crossing.h"
#include "live/log/tool_log.h"
#include "live/stats/device_stats.h"
#include "live/stats/fused_range.h"
#include "live/stats/tensor_stats.h"

namespace py = pybind11;

namespace msprobe {
namespace {

// rules/support_wrap_ops.yaml: {"torch": [...], "tensor": [...], ...}
py::dict load_wrap_ops(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw RulesError(path + ": " + e.what());
  }
  py::dict out;
  if (!root.IsMap()) throw RulesError(path + ": expected a mapping of namespaces to name lists");
  for (const auto& kv : root) {
    py::list names;
    if (kv.second.IsSequence()) {
      for (const auto& n : kv.second) names.append(n.as<std::string>());
    }
    out[py::str(kv.first.as<std::string>())] = names;
  }
  return out;
}

py::object call_name_parts(const std::string& name) {
  const std::optional<CallName> c = parse_call_name(name);
  if (!c) return py::none();
  py::dict d;
  d["section"] = c->section;
  d["api"] = c->api;
  d["index"] = c->index;
  d["backward"] = c->backward;
  return d;
}

// Lines said by threads Python never saw, as the autograd engine's device threads and the dump
// writer's (queued_only) say them: "<thread>:<line>" each.
void say_on_threads(int threads, int lines, bool queued_only) {
  PythonCrossing::NoGil no_gil;
  std::vector<std::thread> started;
  for (int t = 0; t < threads; ++t) {
    started.emplace_back([=] {
      std::optional<QueuedLinesOnly> queued;
      if (queued_only) queued.emplace();
      for (int i = 0; i < lines; ++i)
        say(LogLevel::Info, std::to_string(t) + ":" + std::to_string(i));
    });
  }
  for (std::thread& th : started) th.join();
}

}  // namespace

void bind_tools(py::module_& m) {
  // The lines of both sides go one way, in the order said: msprobe_cpp/log.py.
  m.def(
      "_set_log_sink", [](py::object sink) { set_log_sink(sink.is_none() ? nullptr : sink.ptr()); },
      py::arg("sink").none(true), "sink(level, text) delivers each line; None: stderr (at exit).");
  m.def(
      "say",
      // Any of logging's levels: the enum's type holds each.
      [](int level, std::string text) { say(static_cast<LogLevel>(level), std::move(text)); },
      py::arg("level"), py::arg("text"), "A line, in order with the C++ side's.");
  m.def("load_wrap_ops", &load_wrap_ops, py::arg("path"),
        "The wrap list's names by namespace (rules/support_wrap_ops.yaml).");
  m.def("parse_call_name", &call_name_parts, py::arg("name"),
        "A call name's parts (core/record.h), or None: {section, api, index, backward}.");
  // `python -m msprobe_cpp`: the standalone binary's command line, same code, same output.
  m.def(
      "_cli",
      [](const std::vector<std::string>& args) {
        PythonCrossing::NoGil release;
        const int status = cli_main(args, std::cout, std::cerr, isatty(STDOUT_FILENO) == 1);
        std::cout.flush();
        return status;
      },
      "The msprobe-cpp command line; its exit status.");
  m.def(
      "_check_json",
      [](const std::string& path) {
        CheckOptions options;
        options.path = path;
        std::ostringstream out, err;
        int status = 0;
        {
          PythonCrossing::NoGil release;
          status = run_check(options, out, err);
        }
        return py::make_tuple(status, out.str(), err.str());
      },
      "The check command's JSON report of one path, for replay: (status, report, error).");
}

void bind_for_tests(py::module_& m) {
  m.def("_force_generic_statistics", &force_generic_statistics, py::arg("on"),
        "CPU tensors through the device path's reductions.");
  m.def(
      "_tensor_statistics",
      [](const at::Tensor& t) {
        const Entry e = tensor_stats_entry(t);
        auto number = [](const Scalar& s) {
          return s.is_number() ? py::object(py::float_(s.as_double())) : py::object(py::none());
        };
        return py::make_tuple(number(e.max), number(e.min), number(e.mean), number(e.norm));
      },
      py::arg("tensor"),
      "Max, Min, Mean, Norm as the hooks compute them, nothing recorded (the benches' floor).");
  m.def("_set_write_budget", &set_write_budget_for_testing, py::arg("bytes"),
        "Writes fail once this many bytes are written (a full disk).");
  m.def("_say_on_threads", &say_on_threads, py::arg("threads"), py::arg("lines"),
        py::arg("queued_only"), "Lines said by C++ threads, for the logging tests.");
  m.def("_deliver_said_lines", &deliver_said_lines, "Delivers the queued lines now.");
  m.def("_host_syncs", &host_syncs, "The process's count of statistics' device syncs.");
  m.def(
      "_fused_finite_and_range",
      [](const std::vector<at::Tensor>& tensors) {
        std::vector<FiniteAndRange> found;
        {
          PythonCrossing::NoGil no_gil;  // device work and syncs: other threads may run
          found = fused_finite_and_range(tensors);
        }
        py::list out;
        for (const FiniteAndRange& r : found) out.append(py::make_tuple(r.finite, r.max_abs));
        return out;
      },
      py::arg("tensors"),
      "(finite, largest magnitude) of each tensor: two multi-tensor passes per device and dtype, "
      "one host copy (live/stats/fused_range.h).");
}

}  // namespace msprobe
