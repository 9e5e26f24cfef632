// msprobe_cpp._C: the thin Python face of the C++ engine.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>

#include <iostream>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "bind/api_hook_type.h"
#include "cli/check_command.h"
#include "cli/cli.h"
#include "core/config.h"
#include "core/output_files.h"
#include "core/rules.h"
#include "live/capture/call_values.h"
#include "live/capture/unwritten_memory.h"
#include "live/hooks/hook_scope.h"
#include "live/hooks/module_hooks.h"
#include "live/hooks/submit.h"
#include "live/log/tool_log.h"
#include "live/overflow/model_tensors.h"
#include "live/overflow/python_side.h"
#include "live/session/session.h"
#include "live/stats/device_stats.h"
#include "live/stats/tensor_stats.h"

namespace py = pybind11;
using namespace msprobe;

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
  return std::make_shared<Session>(std::move(config), package_dir, source, library_dir);
}

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

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "msprobe_cpp engine: sessions, API and module hooks, statistics, writers";
  py::register_exception<ConfigError>(m, "ConfigError", PyExc_ValueError);
  py::register_exception<RulesError>(m, "RulesError", PyExc_ValueError);
  py::register_exception<WriteError>(m, "WriteError", PyExc_OSError);

  py::class_<Session, std::shared_ptr<Session>>(m, "Session")
      .def(py::init(&make_session), py::arg("config_path"), py::arg("overrides_json"),
           py::arg("package_dir"), py::arg("library_dir") = "")
      .def("start", &Session::start, py::arg("rank"))
      // Calls still waiting for their device statistics are judged first: a stop they hold is
      // raised here, with the step's files written.
      .def("stop",
           [](Session& s) {
             flush_deferred(s);
             s.stop();
           })
      .def("step",
           [](Session& s) {
             flush_deferred(s);
             s.step();
           })
      .def("pause", [](Session& s) { s.gate().pause(); })
      .def("drain_writes", &Session::drain_writes)
      .def(
          "set_module_dump", [](Session& s, bool on) { s.gate().set_module_dump(on); },
          py::arg("on"))
      .def_property_readonly(
          "finished", [](const Session& s) { return past_last_step(s.config(), s.current_step()); })
      .def_property_readonly("collecting", [](Session& s) { return s.gate().forward(); })
      .def_property_readonly("current_step", &Session::current_step)
      .def_property_readonly("apis_hooked",
                             [](const Session& s) { return s.config().level != Level::L0; })
      .def_property_readonly("modules_hooked",
                             [](const Session& s) { return s.config().level != Level::L1; })
      .def_property_readonly("level", [](const Session& s) { return to_string(s.config().level); })
      .def_property_readonly("dump_path", [](const Session& s) { return s.config().dump_path; })
      .def_property_readonly("extra_apis", [](const Session& s) { return s.config().extra_apis; })
      .def_property_readonly("config_warnings",
                             [](const Session& s) { return s.config().warnings; })
      .def_property_readonly("watching", [](const Session& s) { return s.config().watching(); })
      .def_property_readonly("stats_cache_hits",
                             [](Session& s) { return s.capture().stats_cache().hits(); })
      .def_property_readonly("stats_cache_misses",
                             [](Session& s) { return s.capture().stats_cache().misses(); })
      // One call fills the whole PythonSide, by name (python_objects.h lists the names).
      .def("set_python_side",
           [](Session& s, py::kwargs given) {
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
             if (!side->overflow_type || !side->error_type || !side->on_flagged ||
                 !side->queue_callback) {
               throw py::type_error(
                   "set_python_side: overflow_type, error_type, on_flagged and queue_callback are "
                   "required");
             }
             s.guard().set_python_side(std::move(side));
           })
      .def_property_readonly("host_syncs", [](Session& s) { return s.capture().host_syncs(); })
      .def_property_readonly("headroom",
                             [](Session& s) {
                               py::list out;
                               for (const HeadroomRecord& r : s.guard().headroom_warned()) {
                                 py::list history;
                                 for (const HeadroomPoint& p : r.history) {
                                   py::dict point;
                                   point["step"] = p.step;
                                   point["max"] = p.magnitude;
                                   point["fraction"] = p.fraction;
                                   history.append(point);
                                 }
                                 py::dict site;
                                 site["site"] = r.where;
                                 site["dtype"] = r.dtype;
                                 site["history"] = history;
                                 out.append(site);
                               }
                               return out;
                             })
      .def("set_peer_stopped", [](Session& s) { s.peer_stop().set(); })
      .def(
          "stop_for_peer",
          [](Session& s, int rank, int64_t step, const std::string& call,
             const std::string& origin) {
            flush_deferred(s);
            return s.stop_for_peer(PeerOverflow{rank, step, call, origin});
          },
          py::arg("rank"), py::arg("step"), py::arg("call"), py::arg("origin"))
      .def(
          "add_model_tensor",
          [](Session& s, const std::string& name, const at::Tensor& t, bool buffer) {
            s.guard().models().add(name, t, buffer);
          },
          py::arg("name"), py::arg("tensor"), py::arg("buffer"))
      .def("set_loss_scaled", [](Session& s) { s.guard().loss_scale().set_scaled(); })
      .def(
          "mark_compiled_outputs",
          [](Session& s, py::handle output) {
            if (!s.config().watching() || !s.gate().forward()) return;
            for (const LiveArg& arg : live_args_of(output.ptr())) {
              if (arg.tensor.defined()) s.guard().models().mark_compiled_output(arg.tensor);
              for (const at::Tensor& t : arg.items) s.guard().models().mark_compiled_output(t);
            }
          },
          py::arg("output"))
      .def(
          "judge_loss_scale",
          [](Session& s, double before, double after) {
            if (auto event = s.guard().loss_scale().judge(before, after))
              handle_overflow_event(s, *event);
          },
          py::arg("before"), py::arg("after"))
      .def(
          "judge_optimizer_gradients",
          [](Session& s, const std::string& optimizer, std::vector<std::string> bad, bool reduced) {
            if (auto event =
                    s.guard().judge_optimizer_gradients(optimizer, std::move(bad), reduced)) {
              handle_overflow_event(s, *event);
            }
          },
          py::arg("optimizer"), py::arg("bad"), py::arg("reduced"));

  m.def("set_current_session", &set_current_session, py::arg("session").none(true));
  // The lines of both sides go one way, in the order said: msprobe_cpp/log.py.
  m.def(
      "_set_log_sink", [](py::object sink) { set_log_sink(sink.is_none() ? nullptr : sink.ptr()); },
      py::arg("sink").none(true));
  m.def(
      "say",
      // Any of logging's levels: the enum's type holds each.
      [](int level, std::string text) { say(static_cast<LogLevel>(level), std::move(text)); },
      py::arg("level"), py::arg("text"));
  m.def(
      "overflow_fields",
      [](int64_t step, int rank) {
        OverflowFacts facts;
        facts.step = step;
        facts.rank = rank;
        return overflow_fields(facts, false);
      },
      py::arg("step"), py::arg("rank"),
      "Overflow's fields for a stop that names no call of this rank (a peer's stop)");

  add_api_hook_type(m);

  // Tensor methods need a descriptor to receive `self`; pybind11 callables are not descriptors.
  m.def("as_method", [](py::object f) {
    return py::reinterpret_steal<py::object>(PyInstanceMethod_New(f.ptr()));
  });
  m.def("module_hooks", &make_module_hooks, py::arg("qualname"), py::arg("class_name"),
        py::arg("record") = true, py::arg("dumped") = false);
  m.def("model_hooks", &make_model_hooks, py::arg("class_name"));
  // The debugger's own torch calls (a loss scaler's get_scale()) must not land in the dump.
  m.def("call_unhooked", [](py::function fn) {
    ReentryGuard guard;
    return fn();
  });
  // The optimizer-step check (gradient_guard.py): the names whose tensors hold NaN/inf.
  m.def(
      "nonfinite_gradients",
      [](const std::vector<std::pair<std::string, at::Tensor>>& gradients) {
        ReentryGuard unhooked;
        return non_finite_gradients(gradients);
      },
      py::arg("gradients"));
  // torch.empty and its kin, under task overflow_check: what they return is unwritten memory.
  m.def(
      "mark_unwritten",
      [](py::handle t) {
        if (THPVariable_Check(t.ptr())) unwritten_memory().mark(THPVariable_Unpack(t.ptr()));
      },
      py::arg("tensor"));
  m.def("_force_generic_statistics", &force_generic_statistics, py::arg("on"));
  // The statistics the hooks compute for one tensor, with nothing recorded (the benches' floor).
  m.def(
      "_tensor_statistics",
      [](const at::Tensor& t) {
        const Entry e = tensor_stats_entry(t);
        auto number = [](const Scalar& s) {
          return s.is_number() ? py::object(py::float_(s.as_double())) : py::object(py::none());
        };
        return py::make_tuple(number(e.max), number(e.min), number(e.mean), number(e.norm));
      },
      py::arg("tensor"));
  m.def("_set_write_budget", &set_write_budget_for_testing, py::arg("bytes"));
  // For the tests: lines said by threads Python never saw, as the autograd engine's device threads
  // and the dump writer's (queued_only) say them. "<thread>:<line>" each.
  m.def(
      "_say_on_threads",
      [](int threads, int lines, bool queued_only) {
        py::gil_scoped_release no_gil;
        std::vector<std::thread> started;
        for (int t = 0; t < threads; ++t) {
          started.emplace_back([=] {
            std::optional<QueuedLinesOnly> queued;
            if (queued_only) queued.emplace();
            for (int i = 0; i < lines; ++i) {
              say(LogLevel::Info, std::to_string(t) + ":" + std::to_string(i));
            }
          });
        }
        for (std::thread& th : started) th.join();
      },
      py::arg("threads"), py::arg("lines"), py::arg("queued_only"));
  m.def("_deliver_said_lines", &deliver_said_lines);
  m.def("_host_syncs", &host_syncs);
  m.def("load_wrap_ops", &load_wrap_ops, py::arg("path"));
  m.def(
      "parse_call_name",
      [](const std::string& name) -> py::object {
        const std::optional<CallName> c = parse_call_name(name);
        if (!c) return py::none();
        py::dict d;
        d["section"] = c->section;
        d["api"] = c->api;
        d["index"] = c->index;
        d["backward"] = c->backward;
        return d;
      },
      py::arg("name"),
      "A call name's parts (core/record.h), or None: {section, api, index, backward}.");
  m.def(
      "set_process_group_facts",
      [](py::object type, py::object facts) { set_process_group_facts(type.ptr(), facts.ptr()); },
      py::arg("type"), py::arg("facts"));
  m.attr("__version__") = version();
  // `python -m msprobe_cpp`: the standalone binary's command line, same code, same output.
  m.def("_cli", [](const std::vector<std::string>& args) {
    py::gil_scoped_release release;
    const int status = cli_main(args, std::cout, std::cerr);
    std::cout.flush();
    return status;
  });
  // The check command's JSON report of one path, for `msprobe-cpp replay` (which records were
  // flagged): (exit status, report, error text).
  m.def("_check_json", [](const std::string& path) {
    CheckOptions options;
    options.path = path;
    std::ostringstream out, err;
    int status = 0;
    {
      py::gil_scoped_release release;
      status = run_check(options, out, err);
    }
    return py::make_tuple(status, out.str(), err.str());
  });
}
