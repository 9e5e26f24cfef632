// free_benchmark's backward stage in the checker: what a selected call keeps at its forward, and
// the comparison of its inputs' gradients when its output's gradient arrives.
#include <ATen/ATen.h>

#include <algorithm>

#include "core/preheat_counter.h"
#include "core/record.h"
#include "live/crossing/python_crossing.h"
#include "live/free_benchmark/backward_check.h"
#include "live/free_benchmark/free_benchmark.h"
#include "live/free_benchmark/generator_states.h"
#include "live/free_benchmark/output_compare.h"
#include "live/free_benchmark/perturbation.h"
#include "live/capture/is_tensor.h"
#include "live/hooks/backward_recorder.h"
#include "live/hooks/hook_scope.h"
#include "live/session/session.h"
#include "live/stats/tensor_stats.h"

namespace py = pybind11;

namespace msprobe {
namespace {

// The first output that carries a gradient: the output itself, or an element of a tuple.
std::optional<std::optional<size_t>> gradient_output(const py::object& result) {
  if (is_tensor(result)) {
    if (tensor_of(result).requires_grad()) return std::optional<size_t>();
    return std::nullopt;
  }
  if (!is_py_sequence(result)) return std::nullopt;
  for (size_t i = 0; i < py::len(result); ++i) {
    const py::handle item = result[py::int_(i)];
    if (is_tensor(item) && tensor_of(item).requires_grad()) return std::optional<size_t>(i);
  }
  return std::nullopt;
}

}  // namespace

py::object FreeBenchmark::call_backward(const CheckedCall& call) {
  auto original = [&] { return call.call_original(call.args, call.kwargs); };
  const std::string name = backward_name_of(call.name);
  if (!selects(name) || !at::GradMode::is_enabled()) return original();
  auto keep = std::make_shared<BackwardCall>();
  py::list args(call.args);
  for (size_t i = 0; i < call.args.size(); ++i) {
    const py::handle a = call.args[i];
    if (!is_tensor(a) || !tensor_of(a).requires_grad()) continue;
    keep->positions.push_back(i);
    keep->inputs.push_back(tensor_of(a).detach().clone());
    args[i] = py::none();
  }
  const std::string why_not = skip_reason_of(call);
  if (keep->positions.empty() || !why_not.empty()) {
    if (!why_not.empty())
      say_once("skip " + call.api,
               "msprobe_cpp: free_benchmark: " + call.api + " is not checked: " + why_not);
    return original();
  }
  auto session = session_.lock();
  keep->step = session ? session->current_step() : 0;
  if (preheat_ && preheat_->counting(call.api, keep->step)) return original();
  py::object result = original();
  const auto output_at = gradient_output(result);
  if (!output_at) return result;
  keep->function = call.original;
  keep->args = py::tuple(args);
  keep->kwargs = py::dict(call.kwargs);
  keep->output_at = *output_at;
  keep->name = name;
  keep->api = call.api;
  keep->rank = session ? std::max(0, session->current_rank()) : 0;
  const at::Tensor out = *output_at ? tensor_of(result[py::int_(**output_at)]) : tensor_of(result);
  std::weak_ptr<FreeBenchmark> self = weak_from_this();
  add_gradient_callback(out, [self, keep](const at::Tensor& grad) {
    if (auto checker = self.lock()) checker->check_gradients(*keep, grad);
  });
  return result;
}

void FreeBenchmark::check_gradients(const BackwardCall& call, const at::Tensor& grad) {
  PythonCrossing::Gil gil;
  ReentryGuard unhooked;  // the runs below are the checker's, not the program's calls
  at::AutoGradMode with_graph(true);
  GeneratorStates generators;
  try {
    const InputGradients grads = input_gradients(call, section_.pert_mode, grad);
    if (!grads.ran) return;
    UnequalRow base;
    base.rank = call.rank;
    base.pert_mode = to_string(section_.pert_mode);
    base.stage = to_string(section_.stage);
    base.step = call.step;
    base.api_name = call.name;
    double max_ratio = 0;
    for (size_t k = 0; k < grads.original.size() && k < grads.perturbed.size(); ++k) {
      const at::Tensor& o = grads.original[k];
      const at::Tensor& p = grads.perturbed[k];
      if (!o.defined() || !p.defined()) continue;
      UnequalRow row = base;
      row.dtype = dtype_name(o.scalar_type());
      row.shape.assign(o.sizes().begin(), o.sizes().end());
      row.has_shape = true;
      bool ok = true;
      if (section_.fuzz_on_cpu && !preheat_) {
        ok = single_compare(o, p);
      } else {
        row.output_index = static_cast<int64_t>(k);
        const double threshold =
            preheat_ ? preheat_->threshold(call.api, row.dtype)
                     : ratio_threshold(float_kind(o.scalar_type()), section_.pert_mode);
        row.ratio = output_ratio(o, p, section_.stage);
        max_ratio = std::max(max_ratio, *row.ratio);
        ok = consistent(*row.ratio, threshold);
      }
      if (!ok) write_row(row);
    }
    // msprobe's backward samples have no CPU run to compare with: each counts as agreeing.
    if (preheat_ && !grads.original.empty() && grads.original[0].defined() &&
        preheat_->sampled(call.api, call.step))
      preheat_->record(call.api, dtype_name(grads.original[0].scalar_type()), max_ratio, true);
  } catch (const c10::Error& e) {
    say_once(
        "failed " + call.api,
        "free_benchmark: " + call.name + " could not be checked: " + e.what_without_backtrace(),
        true);
  } catch (const std::exception& e) {
    say_once("failed " + call.api,
             "free_benchmark: " + call.name + " could not be checked: " + e.what(), true);
  }
}

}  // namespace msprobe
