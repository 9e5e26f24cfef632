#include "live/session/overflow_guard.h"

#include <pybind11/pybind11.h>

#include "live/hooks/hook_scope.h"
#include "live/log/tool_log.h"
#include "live/overflow/model_tensors.h"
#include "live/overflow/python_objects.h"
#include "live/session/headroom_sites.h"

namespace msprobe {

OverflowGuard::OverflowGuard(const Config& config, const SessionPaths& paths,
                             Guarded<StepState>& state, CodeRegistry& codes)
    : config_(config),
      paths_(paths),
      state_(state),
      codes_(codes),
      loss_scale_(paths, state),
      models_(state) {}

OverflowGuard::~OverflowGuard() {
  if (!py_) return;
  if (!Py_IsInitialized()) {
    py_->leak();
    return;
  }
  pybind11::gil_scoped_acquire gil;
  py_.reset();
}

void OverflowGuard::set_python_side(std::unique_ptr<PythonSide> side) {
  py_ = std::move(side);
}

void ModelRegistry::add(const std::string& name, const at::Tensor& t, bool buffer) {
  state_.with_lock([&](StepState& s) { s.models.add(name, t, buffer); });
}

void ModelRegistry::mark_compiled_output(const at::Tensor& t) {
  state_.with_lock([&](StepState& s) {
    if (s.watch) s.watch->mark_compiled_output(t);
  });
}

OverflowFacts OverflowGuard::facts_of(const StepState& s, const StoredCall& call,
                                      const Verdict& v) const {
  OverflowFacts facts;
  facts.finding = *v.finding;
  facts.origin = v.origin;
  facts.parameter = v.parameter;
  if (v.origin == Origin::Peer) facts.peer_rank = call.peer_rank;
  facts.note = v.note;
  facts.absorbed = v.judgement == Judgement::Absorbed;
  // A backward call's forward module names it better than the module backward it ran inside.
  facts.module = call.module_hint ? call.module_hint : call.parent;
  if (!facts.module && !is_backward_name(call.record.name)) facts.module = started_model_forward();
  facts.step = s.step;
  facts.rank = s.rank < 0 ? 0 : s.rank;
  if (s.decisions->budget_left()) facts.dump.dir = paths_.dir_of(s);
  // The source line is added by add(), outside the lock (it needs the GIL).
  facts.tensors = anomalous_args(call.record, facts.finding, config_.overflow_check.compat);
  if (s.headroom)
    facts.history = s.headroom->trend(headroom_site(call.record.name, call.stack), s.step);
  return facts;
}

std::optional<OverflowEvent> OverflowGuard::judge_model_output(StoredCall&& call,
                                                               const LiveTensors& live) {
  CallDecision d;
  state_.with_lock([&](StepState& s) {
    if (!s.watch) return;
    const Verdict v = s.watch->judge_model_output(call.record, live);
    d = s.decisions->on_call(v, false, [&] {
      OverflowFacts facts = facts_of(s, call, v);
      facts.started_model = true;
      return facts;
    });
    // A flagged step is written even when no call of it was recorded (a compiled model).
    if (v.flagged) s.dirty = true;
  });
  if (d.wants_source) tell_source(call.stack, call.record.name, d.event ? &*d.event : nullptr);
  return std::move(d.event);
}

void OverflowGuard::set_replay(const OverflowFacts& facts) {
  state_.with_lock([&](StepState& s) {
    if (s.decisions) s.decisions->set_replay(facts.finding.call, facts.replay);
  });
}

void OverflowGuard::set_raised_calls_later(const std::string& call, int64_t later) {
  state_.with_lock([&](StepState& s) {
    if (s.decisions) s.decisions->set_raised_calls_later(call, later);
  });
}

void OverflowGuard::tell_source(const StackPtr& stack, const std::string& call,
                                OverflowEvent* event) {
  if (!stack) return;
  std::optional<std::string> source;
  {
    pybind11::gil_scoped_acquire gil;
    source = codes_.first_frame_outside(*stack, {paths_.package_dir, paths_.library_dir});
  }
  if (event) event->facts.source = source;
  state_.with_lock([&](StepState& s) { s.decisions->set_source(call, source); });
}

void LossScaleWatch::set_scaled() {
  state_.with_lock([](StepState& s) {
    if (s.decisions) s.decisions->set_loss_scaled();
  });
}

std::optional<OverflowEvent> LossScaleWatch::judge(double before, double after) {
  ScaleDecision d = state_.with_lock([&](StepState& s) {
    // A loss scaler given to start() under another task: nothing to judge.
    if (!s.decisions) return ScaleDecision{};
    return s.decisions->loss_scale(before, after, s.step, [&] {
      OverflowFacts f;
      f.finding.call = "(loss scaler)";
      f.step = s.step;
      f.rank = s.rank < 0 ? 0 : s.rank;
      if (s.decisions->budget_left()) f.dump.dir = paths_.dir_of(s);
      return f;
    });
  });
  if (!d.say.empty()) say(LogLevel::Info, std::move(d.say));
  return std::move(d.event);
}

std::optional<OverflowEvent> OverflowGuard::end_of_backward() {
  if (!config_.watching()) return std::nullopt;
  // The gradients are gathered under the lock and looked at (a device sync) after it.
  std::optional<std::vector<std::pair<std::string, at::Tensor>>> gradients;
  bool models_known = false;
  state_.with_lock([&](StepState& s) {
    if (!s.decisions->backward_pass_ended()) return;
    models_known = !s.models.empty();
    gradients = s.models.gradients();
  });
  if (!gradients) return std::nullopt;
  std::vector<std::string> bad = non_finite_gradients(*gradients);
  return state_.with_lock(
      [&](StepState& s) { return s.decisions->backward_verdict(models_known, std::move(bad)); });
}

namespace {

// The facts of a finding at an optimizer's step, which no record names.
OverflowFacts optimizer_step_facts(const StepState& s, const SessionPaths& paths,
                                   const std::string& optimizer) {
  OverflowFacts f;
  f.finding.call = "(before " + optimizer + ".step)";
  f.module = "(none: " + optimizer + ".step runs outside the model)";
  f.step = s.step;
  f.rank = s.rank < 0 ? 0 : s.rank;
  if (s.decisions->budget_left()) f.dump.dir = paths.dir_of(s);
  return f;
}

}  // namespace

std::optional<OverflowEvent> OverflowGuard::judge_optimizer_state(const std::string& optimizer,
                                                                  const std::string& state,
                                                                  const std::string& parameter,
                                                                  size_t more) {
  if (!config_.watching()) return std::nullopt;
  return state_.with_lock([&](StepState& s) -> std::optional<OverflowEvent> {
    if (!s.decisions) return std::nullopt;
    std::optional<OverflowEvent> event = s.decisions->optimizer_state(
        state, parameter, more, [&] { return optimizer_step_facts(s, paths_, optimizer); });
    if (event) s.dirty = true;  // written even when no call of the step was recorded
    return event;
  });
}

std::optional<OverflowEvent> OverflowGuard::judge_optimizer_gradients(const std::string& optimizer,
                                                                      std::vector<std::string> bad,
                                                                      bool reduced) {
  if (!config_.watching() || bad.empty()) return std::nullopt;
  return state_.with_lock([&](StepState& s) -> std::optional<OverflowEvent> {
    if (!s.decisions) return std::nullopt;
    OverflowDecisions::GradientSource source;
    source.reduced = reduced;
    source.compiled = s.watch && s.watch->compiled_region_ran();
    // Without a started model nothing says whether an earlier step left gradients.
    source.earlier_step_left = s.models.empty() || s.models.earlier_step_left_gradients();
    std::optional<OverflowEvent> event = s.decisions->optimizer_gradients(
        std::move(bad), source, [&] { return optimizer_step_facts(s, paths_, optimizer); });
    // Written even when no call of the step was recorded: the message names its folder.
    if (event) s.dirty = true;
    return event;
  });
}

}  // namespace msprobe
