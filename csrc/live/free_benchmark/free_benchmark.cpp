#include "live/free_benchmark/free_benchmark.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <vector>

#include "core/output_files.h"
#include "core/preheat_counter.h"
#include "live/free_benchmark/generator_states.h"
#include "live/free_benchmark/output_compare.h"
#include "live/free_benchmark/perturbation.h"
#include "live/capture/is_tensor.h"
#include "live/log/tool_log.h"
#include "live/session/session.h"
#include "live/stats/tensor_stats.h"
#include "live/crossing/python_crossing.h"

namespace py = pybind11;

namespace msprobe {
namespace {

// The call writes into its first argument: a Tensor method ending in "_", an augmented
// assignment, item assignment, or inplace=True.
bool writes_first_argument(const std::string& api, const py::dict& kwargs) {
  const std::string op = api.substr(api.rfind('.') + 1);
  if (op == "__setitem__") return true;
  if (op.size() > 4 && op.rfind("__i", 0) == 0 && op.compare(op.size() - 2, 2, "__") == 0)
    return true;
  if (!op.empty() && op.back() == '_' && op.rfind("__", 0) != 0) return true;
  return kwargs.contains("inplace") && py::bool_(kwargs["inplace"]);
}

// scaled_dot_product_attention (and multi-head attention) with a dropout probability above 0.
bool attention_dropout(const std::string& api, const py::tuple& args, const py::dict& kwargs) {
  size_t at = 0;
  if (api == "Functional.scaled_dot_product_attention")
    at = 4;
  else if (api == "Functional.multi_head_attention_forward")
    at = 11;
  else
    return false;
  py::object p = kwargs.contains("dropout_p") ? py::object(kwargs["dropout_p"])
                 : args.size() > at           ? py::object(args[at])
                                              : py::object();
  if (!p || p.is_none()) return false;
  try {
    return p.cast<double>() > 0;
  } catch (const py::cast_error&) {
    return false;
  }
}

// The second run's arguments: what the call wrote into (its first argument, as it was before;
// running statistics, as copies) is not the program's.
py::tuple rerun_inputs(const CheckedCall& call, const py::object& written_copy) {
  const std::vector<size_t> statistics = written_statistics(call.api);
  if (!written_copy && statistics.empty()) return call.args;
  py::list items(call.args);
  if (written_copy) items[0] = written_copy;
  for (size_t i : statistics)
    if (i < call.args.size()) items[i] = copy_tensors(call.args[i]);
  return py::tuple(items);
}

}  // namespace

FreeBenchmark::FreeBenchmark(const TaskParts& parts)
    : section_(parts.config.free_benchmark),
      csv_path_(free_benchmark_csv(parts.config.dump_path)),
      session_(parts.session) {
  if (section_.preheat)
    preheat_ = std::make_unique<PreheatCounter>(section_.preheat_step, section_.max_sample,
                                                section_.pert_mode);
}

FreeBenchmark::~FreeBenchmark() = default;

bool FreeBenchmark::selects(const std::string& name) const {
  const std::shared_ptr<Session> session = session_.lock();
  return session && session->hooks().selection.begin(name, "", false).forward;
}

std::string FreeBenchmark::skip_reason_of(const CheckedCall& call) const {
  std::string why =
      skip_reason(call.api, call.kwargs.contains("out") && !call.kwargs["out"].is_none());
  if (why.empty() && attention_dropout(call.api, call.args, call.kwargs)) why = kRandomReason;
  return why;
}

py::object FreeBenchmark::call(const CheckedCall& call) {
  PythonCrossing::assert_gil();
  if (section_.stage == FuzzStage::Backward) return call_backward(call);
  // improve_precision runs again only what it can upcast: a float32 call costs a look.
  const bool selected = selects(call.name) &&
                        (section_.pert_mode != PertMode::ImprovePrecision ||
                         holds_low_precision(call.args) || holds_low_precision(call.kwargs));
  if (!selected) return call.call_original(call.args, call.kwargs);
  const std::optional<size_t> fuzzed = fuzzed_argument(call.args);
  const std::string why_not = fuzzed ? skip_reason_of(call) : std::string();
  if (!fuzzed || !why_not.empty()) {
    if (!why_not.empty())
      say_once("skip " + call.api,
               "msprobe_cpp: free_benchmark: " + call.api + " is not checked: " + why_not);
    return call.call_original(call.args, call.kwargs);
  }
  auto session = session_.lock();
  const int64_t step = session ? session->current_step() : 0;
  if (preheat_ && preheat_->counting(call.api, step))
    return call.call_original(call.args, call.kwargs);
  // What an in-place call is about to write, as it was.
  py::object written_copy;
  if (writes_first_argument(call.api, call.kwargs) && call.args.size() > 0)
    written_copy = copy_tensors(call.args[0]);
  py::object original = call.call_original(call.args, call.kwargs);
  const py::tuple args = rerun_inputs(call, written_copy);
  bool ran = false;
  try {
    py::object perturbed = rerun(call, args, section_.pert_mode, *fuzzed, ran);
    if (!ran) return original;
    if (section_.handler == HandlerType::Fix) return fix(call, original, perturbed);
    compare(call, original, perturbed, [&] {
      bool cpu_ran = false;
      return rerun(call, args, PertMode::ToCpu, *fuzzed, cpu_ran);
    });
  } catch (const c10::Error& e) {
    say_once(
        "failed " + call.api,
        "free_benchmark: " + call.name + " could not be checked: " + e.what_without_backtrace(),
        true);
  } catch (const py::error_already_set& e) {
    say_once("failed " + call.api,
             "free_benchmark: " + call.name + " could not be checked: " + e.what(), true);
  } catch (const std::exception& e) {
    say_once("failed " + call.api,
             "free_benchmark: " + call.name + " could not be checked: " + e.what(), true);
  }
  return original;
}

py::object FreeBenchmark::rerun(const CheckedCall& call, const py::tuple& args, PertMode mode,
                                size_t fuzzed, bool& ran) {
  at::NoGradGuard no_graph;
  RerunArgs again = rerun_args(mode, args, call.kwargs, fuzzed);
  if (!again.rerun) return py::none();
  if (mode != PertMode::NoChange && !again.perturbed && !again.why_not.empty())
    say(LogLevel::Debug, "msprobe_cpp: free_benchmark: for " + call.name + ", " + again.why_not);
  GeneratorStates generators;
  ran = true;
  return call.call_original(again.args, again.kwargs);
}

void FreeBenchmark::say_once(const std::string& key, const std::string& text, bool warning) {
  const std::shared_ptr<Session> session = session_.lock();
  if (!session || !session->said().first("free_benchmark " + key)) return;
  if (warning)
    say_warning(text);
  else
    say(LogLevel::Info, text);
}

}  // namespace msprobe
