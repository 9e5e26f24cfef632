#include "live/hooks/module_hooks.h"

#include <algorithm>

#include "live/capture/call_values.h"
#include "live/capture/live_tensors.h"
#include "live/hooks/hook_scope.h"
#include "live/hooks/module_backward.h"
#include "live/hooks/parameter_grads.h"
#include "live/hooks/submit.h"
#include "live/log/tool_log.h"
#include "live/overflow/python_side.h"
#include "live/session/session.h"

namespace py = pybind11;

namespace msprobe {

namespace {

// The forward's positional and keyword inputs, as entries (and, when the guard watches, as the
// live tensors it judges).
void record_inputs(Session& s, OpenModuleCall& open, py::handle inputs, py::handle kwargs) {
  const EntryOptions& options = s.hooks().capture.options(open.name);
  const bool watching = s.config().watching();
  open.inputs = item_entries(inputs, options, options.stem(open.name, "input"),
                             watching ? &open.live.inputs : nullptr);
  open.kwargs =
      kwarg_entries(kwargs, options, open.name, watching ? &open.live.kwargs : nullptr);
}

void hook_backward(const std::shared_ptr<Session>& s, const std::string& backward_key,
                   const std::string& base, const OpenModuleCall& open, py::handle output) {
  try {
    attach_module_backward(s, backward_key, base, *open.backward, output, open.stack);
  } catch (const std::exception& e) {
    // The model must train on: this module's backward records are skipped, said once.
    if (s->said().first("module backward " + base)) {
      say_warning("the backward records of " + base +
                  " are skipped: its autograd nodes could not be hooked (" + e.what() + ")");
    }
  }
}

// The forward's record, its outputs added to what the pre-hook opened.
StoredCall finished_call(Session& s, OpenModuleCall& open, py::handle output) {
  StoredCall call;
  call.epoch = open.epoch;
  call.record.name = std::move(open.name);
  call.record.has_inputs = open.selected.inputs;
  call.record.has_outputs = open.selected.outputs;
  call.record.inputs = std::move(open.inputs);
  call.record.kwargs = std::move(open.kwargs);
  if (open.selected.outputs) {
    const EntryOptions& options = s.hooks().capture.options(call.record.name);
    call.record.outputs =
        item_entries(output, options, options.stem(call.record.name, "output"),
                     s.config().watching() ? &open.live.outputs : nullptr);
  }
  call.stack = std::move(open.stack);
  call.parent = std::move(open.parent);
  if (s.config().watching() && s.config().level == Level::L0) {
    open.live.enclosing = enclosing_calls();
  }
  return call;
}

}  // namespace

py::tuple make_module_hooks(const std::string& qualname, const std::string& class_name, bool record,
                            bool dumped) {
  const std::string base = module_name_base(qualname, class_name);
  const std::string forward_key = base + ".forward";
  const std::string backward_key = base + ".backward";

  // PyTorch >= 2.0 passes keyword arguments too (registered with with_kwargs=True).
  auto on = [dumped](Session& s) {
    return dumped ? s.hooks().gate.module_dump() : s.hooks().gate.forward();
  };
  auto pre = [forward_key, record, on](py::handle module, py::handle inputs, py::handle kwargs) {
    std::shared_ptr<Session> s = current_session();
    if (s && s->peer_stop().unraised()) raise_peer_stop(*s);  // as ApiHook::call
    if (!s || !on(*s)) return;
    if (s->peer_stop().stopped()) raise_peer_stop(*s);
    Selection& selection = s->hooks().selection;
    OpenModuleCall open;
    open.module = module;
    open.epoch = s->hooks().numbering.epoch();
    open.name = forward_key + "." + std::to_string(s->hooks().numbering.next_index(forward_key));
    if (!record) {
      push_module_call(std::move(open));
      return;
    }
    open.selected = selection.begin(open.name, "", inside_listed_module());
    open.listed = selection.has_list() && selection.listed(open.name);
    open.parent = enclosing_module();
    if (open.selected.forward) {
      if (open.selected.inputs) record_inputs(*s, open, inputs, kwargs);
      open.stack = s->hooks().codes.capture();
    }
    open.backward = module_backward_start(inputs);
    push_module_call(std::move(open));
  };

  auto post = [base, backward_key, on](py::handle module, py::handle /*inputs*/,
                                       py::handle output) {
    OpenModuleCall open;
    // A forward that began before collection started has no open call: nothing to record.
    if (!pop_module_call(module, open)) return;
    std::shared_ptr<Session> s = current_session();
    if (!s || !on(*s)) return;
    s->hooks().selection.end(open.name);
    if (open.backward) hook_backward(s, backward_key, base, open, output);
    // msprobe 26.x records the module's parameters and, unless data_mode is forward only, their
    // gradients.
    const bool parameters = s->hooks().format.module_parameters;
    if (parameters && open.selected.any() && s->config().collect().data_mode.backward)
      hook_parameter_grads(s, module, base);
    if (!open.selected.forward) return;
    StoredCall call = finished_call(*s, open, output);
    if (parameters && open.selected.outputs) {
      call.record.parameters = parameter_entries(*s, module, call.record.name);
      call.record.has_parameters = true;
    }
    submit(*s, std::move(call), std::move(open.live));
  };

  return py::make_tuple(
      py::cpp_function(pre, py::arg("module"), py::arg("args"), py::arg("kwargs") = py::none()),
      py::cpp_function(post));
}

py::tuple make_model_hooks(const std::string& class_name) {
  const std::string key = module_name_base("", class_name) + ".forward";
  auto pre = [class_name](py::handle module, py::handle inputs, py::handle kwargs) {
    std::shared_ptr<Session> s = current_session();
    if (!s || !s->config().watching()) return;
    StartedModelCall call{module, class_name, {}};
    auto take = [&call](py::handle values) {
      for (const LiveArg& a : live_args_of(values)) {
        if (a.tensor.defined()) call.args.push_back(a.tensor);
        call.args.insert(call.args.end(), a.items.begin(), a.items.end());
      }
    };
    take(inputs);
    if (PyDict_Check(kwargs.ptr()))
      take(py::reinterpret_steal<py::object>(PyDict_Values(kwargs.ptr())));
    started_model_calls().push_back(std::move(call));
  };
  auto post = [key](py::handle module, py::handle /*inputs*/, py::handle output) {
    auto& calls = started_model_calls();
    auto mine = std::find_if(calls.rbegin(), calls.rend(),
                             [&](const StartedModelCall& c) { return c.module.is(module); });
    if (mine == calls.rend()) return;
    StartedModelCall call = std::move(*mine);
    calls.erase(std::next(mine).base(), calls.end());  // with any left open inside it (raised)
    std::shared_ptr<Session> s = current_session();
    if (!s || !s->config().watching() || !s->hooks().gate.forward()) return;
    // What the calls before it made must be known first (batched sync).
    if (s->deferred().any()) flush_deferred(*s);
    StoredCall judged;
    judged.record.name = key + "." + std::to_string(s->hooks().numbering.next_index(key));
    judged.record.has_inputs = false;
    LiveTensors live;
    // Judged at once, whatever the sync mode: it is one call a step, and the last place to stop.
    EntryOptions options = s->hooks().capture.options();
    options.pending = nullptr;
    options.saver = nullptr;
    judged.record.outputs = item_entries(output, options, "", &live.outputs);
    live.enclosing.push_back({"the started model " + call.class_name, std::move(call.args), true});
    judged.stack = s->hooks().codes.capture();
    warn_statistics_failure(*s, judged.record.name);
    if (auto event = s->guard().judge_model_output(std::move(judged), live)) {
      handle_overflow_event(*s, *event);
    }
  };
  return py::make_tuple(
      py::cpp_function(pre, py::arg("module"), py::arg("args"), py::arg("kwargs") = py::none()),
      py::cpp_function(post));
}

}  // namespace msprobe
