#include "live/session/overflow_guard.h"

#include <pybind11/pybind11.h>

#include "live/crossing/python_crossing.h"
#include "live/hooks/hook_scope.h"
#include "live/log/tool_log.h"
#include "live/overflow/model_tensors.h"
#include "live/overflow/python_objects.h"

namespace msprobe {

OverflowGuard::OverflowGuard(const Config& config, const SessionPaths& paths, CodeRegistry& codes,
                             const std::string& source, const StepTickets& tickets)
    : config_(config),
      paths_(paths),
      codes_(codes),
      tickets_(tickets),
      state_(LockLevel::Guard, tickets) {
  if (!config_.watching()) return;
  state_.with_lock([&](GuardState& g) {
    try {
      g.watch = std::make_unique<OverflowWatch>(config_, g.models);
    } catch (const RulesError& e) {
      // A rules file the config names is part of the config: its error names both.
      throw ConfigError(source + ": overflow_check.rules: " + e.what());
    }
    g.decisions = std::make_unique<OverflowDecisions>(config_.overflow_check);
    if (config_.overflow_check.headroom > 0) {
      g.headroom = std::make_unique<Headroom>(config_.overflow_check.headroom);
    }
  });
}

OverflowGuard::~OverflowGuard() {
  if (!py_) return;
  if (!Py_IsInitialized()) {
    py_->leak();
    return;
  }
  PythonCrossing::Gil gil;
  py_.reset();
}

void OverflowGuard::set_python_side(std::unique_ptr<PythonSide> side) {
  PythonCrossing::assert_gil();
  py_ = std::move(side);
}

void OverflowGuard::begin_step(bool first) {
  locked([&](GuardState& g, const StepTicket&) {
    // What "written before this step began" compares with.
    if (first && g.watch) g.models.new_step();
  });
}

bool OverflowGuard::flagged_unstored() const {
  return locked([](GuardState& g, const StepTicket&) { return g.flagged_unstored; });
}

bool OverflowGuard::step_flagged() const {
  return locked([](GuardState& g, const StepTicket&) {
    return g.decisions && g.decisions->step_flagged();
  });
}

void OverflowGuard::flag_for_monitor(const std::string& alert) {
  locked([&](GuardState& g, const StepTicket&) {
    if (!g.monitor_alert) g.monitor_alert = alert;
  });
}

void OverflowGuard::reset_step(GuardState& g) {
  g.flagged_unstored = false;
  g.monitor_alert.reset();
  g.scale_before.reset();
  if (g.watch) g.watch->new_step();
  if (g.decisions) g.decisions->new_step();
}

GuardStepEnd OverflowGuard::end_step(bool calls_due, bool at_stop,
                                     const std::optional<PeerOverflow>& peer,
                                     const OverflowFacts* stop) {
  return locked([&](GuardState& g, const StepTicket& ticket) {
    GuardStepEnd end;
    if (stop && g.decisions) g.decisions->complete(*stop);
    if (!calls_due && !g.flagged_unstored && !g.monitor_alert) return end;
    // A scaled step is written at step(), once the loss scaler has said whether it skipped it.
    if (at_stop && g.decisions && g.decisions->loss_scaled()) return end;
    g.flagged_unstored = false;
    end.closed = end.write = true;
    end.models_started = g.watch && !g.models.empty();
    if (!g.watch) return end;
    // Held NaN/inf that did no damage by now: told once per call site, as absorbed or as held.
    const std::string who = rank_label(ticket.rank);
    for (const std::string& line : g.decisions->finish_held(g.watch->finish_held())) {
      end.said.push_back(who + line);
    }
    // Task overflow_check writes only the steps it flagged; a clean step leaves nothing.
    DumpDecision d = g.decisions->dump_step(g.watch->step_flagged() || g.monitor_alert.has_value(),
                                            peer.has_value(), ticket.step);
    if (!d.say.empty()) end.said.push_back(std::move(d.say));
    end.write = d.dump;
    if (!d.dump) return end;
    end.report = Report{Findings(g.watch->findings()), g.decisions->first_anomaly(), peer,
                        std::nullopt, std::exchange(g.monitor_alert, std::nullopt)};
    end.judgements = g.watch->judgements();
    return end;
  });
}

CallVerdict OverflowGuard::judge_call(const StoredCall& call, const LiveTensors& live) {
  CallVerdict out;
  CallDecision d;
  std::optional<HeadroomRecord> crossed;  // a 16-bit call site that just reached the headroom
  int rank = -1;
  locked([&](GuardState& g, const StepTicket& ticket) {
    if (call.epoch != 0 && call.epoch != ticket.epoch) {
      out.dropped = true;
      return;
    }
    rank = ticket.rank;
    if (g.headroom) crossed = observe_headroom(*g.headroom, call, ticket.step);
    if (!g.watch) return;
    const Verdict v = g.watch->judge(call.record, live, call.peer_rank);
    const bool backward = is_backward_name(call.record.name);
    std::optional<OverflowFacts> facts;
    if (g.decisions->keeps_facts(v, backward)) facts = facts_of(g, ticket, call, v);
    d = g.decisions->on_call(v, backward, std::move(facts));
  });
  if (out.dropped) return out;
  if (crossed) say_headroom(*crossed, call, rank);
  // The source line needs the GIL, which must never be waited for while holding a lock a thread
  // holding the GIL may wait for (backward recorders run without the GIL).
  if (d.wants_source) tell_source(call.stack, call.record.name, d.event ? &*d.event : nullptr);
  if (d.tell_absorbed) {
    const std::string line =
        locked([](GuardState& g, const StepTicket&) { return g.decisions->absorbed_line(); });
    if (!line.empty()) say(LogLevel::Info, rank_label(rank) + line);
  }
  out.keep_tensors = d.keep_tensors;
  out.event = std::move(d.event);
  return out;
}

void OverflowGuard::add_model_tensor(const std::string& name, const at::Tensor& t, bool buffer) {
  locked([&](GuardState& g, const StepTicket&) { g.models.add(name, t, buffer); });
}

std::vector<std::optional<std::string>> OverflowGuard::parameter_names(
    const std::vector<at::Tensor>& tensors) {
  return locked([&](GuardState& g, const StepTicket&) {
    std::vector<std::optional<std::string>> names;
    names.reserve(tensors.size());
    for (const at::Tensor& t : tensors) {
      std::optional<ModelTensors::Found> found = g.models.find(t);
      names.push_back(found && !found->buffer ? std::optional<std::string>(found->name)
                                              : std::nullopt);
    }
    return names;
  });
}

void OverflowGuard::mark_compiled_output(const at::Tensor& t) {
  locked([&](GuardState& g, const StepTicket&) {
    if (g.watch) g.watch->mark_compiled_output(t);
  });
}

OverflowFacts OverflowGuard::facts_of(const GuardState& g, const StepTicket& ticket,
                                      const StoredCall& call, const Verdict& v) const {
  OverflowFacts facts;
  facts.finding = *v.finding;
  facts.origin = v.origin;
  facts.parameter = v.parameter;
  if (v.origin == Origin::Peer) facts.peer.rank = call.peer_rank;
  facts.note = v.note;
  facts.absorbed = v.judgement == Judgement::Absorbed;
  // A backward call's forward module names it better than the module backward it ran inside.
  facts.module = call.module_hint ? call.module_hint : call.parent;
  if (!facts.module && !is_backward_name(call.record.name)) facts.module = started_model_forward();
  facts.step = ticket.step;
  facts.rank = ticket.rank < 0 ? 0 : ticket.rank;
  if (g.decisions->budget_left()) facts.dump.dir = paths_.dir_of(ticket);
  // The source line is added after the lock (it needs the GIL).
  facts.tensors = anomalous_args(call.record, facts.finding, config_.overflow_check.compat);
  if (g.headroom)
    facts.history = g.headroom->trend(headroom_site(call.record.name, call.stack), ticket.step);
  return facts;
}

std::optional<OverflowEvent> OverflowGuard::judge_model_output(StoredCall&& call,
                                                               const LiveTensors& live) {
  CallDecision d;
  locked([&](GuardState& g, const StepTicket& ticket) {
    if (!g.watch) return;
    const Verdict v = g.watch->judge_model_output(call.record, live);
    std::optional<OverflowFacts> facts;
    if (g.decisions->keeps_facts(v, false)) {
      facts = facts_of(g, ticket, call, v);
      facts->started_model = true;
    }
    d = g.decisions->on_call(v, false, std::move(facts));
    // A flagged step is written even when no call of it was recorded (a compiled model).
    if (v.flagged) g.flagged_unstored = true;
  });
  if (d.wants_source) tell_source(call.stack, call.record.name, d.event ? &*d.event : nullptr);
  return std::move(d.event);
}

void OverflowGuard::tell_source(const StackPtr& stack, const std::string& call,
                                OverflowEvent* event) {
  if (!stack) return;
  std::optional<std::string> source;
  {
    PythonCrossing::Gil gil;
    source = codes_.first_frame_outside(*stack, {paths_.package_dir, paths_.library_dir});
  }
  if (event) event->facts.source = source;
  if (event && event->raise) return;  // end_step takes it, with the stop's other late facts
  locked([&](GuardState& g, const StepTicket&) { g.decisions->set_source(call, source); });
}

void OverflowGuard::set_loss_scaled(double before) {
  locked([&](GuardState& g, const StepTicket&) {
    g.scale_before = before;
    if (g.decisions) g.decisions->set_loss_scaled();
  });
}

std::optional<OverflowEvent> OverflowGuard::judge_loss_scale(double after, bool skipped) {
  ScaleDecision d = locked([&](GuardState& g, const StepTicket& ticket) {
    const std::optional<double> before = std::exchange(g.scale_before, std::nullopt);
    // A loss scaler given to start() under another task: nothing to judge.
    if (!g.decisions || !before) return ScaleDecision{};
    OverflowFacts blank;
    blank.finding.call = "(loss scaler)";
    blank.step = ticket.step;
    blank.rank = ticket.rank < 0 ? 0 : ticket.rank;
    if (g.decisions->budget_left()) blank.dump.dir = paths_.dir_of(ticket);
    return g.decisions->loss_scale(*before, after, skipped, ticket.step, blank);
  });
  if (!d.say.empty()) say(LogLevel::Info, std::move(d.say));
  return std::move(d.event);
}

std::optional<OverflowEvent> OverflowGuard::end_of_backward() {
  if (!config_.watching()) return std::nullopt;
  // The gradients are gathered under the lock and looked at (a device sync) after it.
  std::optional<std::vector<std::pair<std::string, at::Tensor>>> gradients;
  bool models_known = false;
  locked([&](GuardState& g, const StepTicket&) {
    if (!g.decisions->backward_pass_ended()) return;
    models_known = !g.models.empty();
    gradients = g.models.gradients();
  });
  if (!gradients) return std::nullopt;
  std::vector<std::string> bad = non_finite_gradients(*gradients);
  return locked([&](GuardState& g, const StepTicket&) {
    return g.decisions->backward_verdict(models_known, std::move(bad));
  });
}

namespace {

// The facts of a finding at an optimizer's step, which no record names.
OverflowFacts optimizer_step_facts(const GuardState& g, const StepTicket& ticket,
                                   const SessionPaths& paths, const std::string& optimizer,
                                   const char* when = "before") {
  OverflowFacts f;
  f.finding.call = std::string("(") + when + " " + optimizer + ".step)";
  f.module = "(none: " + optimizer + ".step runs outside the model)";
  f.step = ticket.step;
  f.rank = ticket.rank < 0 ? 0 : ticket.rank;
  if (g.decisions->budget_left()) f.dump.dir = paths.dir_of(ticket);
  return f;
}

}  // namespace

std::optional<OverflowEvent> OverflowGuard::judge_optimizer(OptimizerLook look,
                                                            const StackPtr& caller) {
  if (!config_.watching()) return std::nullopt;
  std::optional<OverflowEvent> event;
  switch (look.when) {
    case OptimizerLook::When::Gradients:
      event = optimizer_gradients(look);
      break;
    case OptimizerLook::When::State:
      event = optimizer_state(look);
      break;
    case OptimizerLook::When::Update:
      event = optimizer_update(look);
      break;
    case OptimizerLook::When::Settings:
      event = optimizer_settings(look);
      break;
  }
  // The program's line that called the optimizer's step.
  if (event) tell_source(caller, event->facts.finding.call, &*event);
  return event;
}

std::optional<OverflowEvent> OverflowGuard::optimizer_state(const OptimizerLook& look) {
  return locked([&](GuardState& g, const StepTicket& ticket) -> std::optional<OverflowEvent> {
    if (!g.decisions) return std::nullopt;
    OverflowDecisions::BeforeStep before;
    before.state = look.state;
    before.parameter = look.parameter;
    before.more = look.more;
    std::optional<OverflowEvent> e = g.decisions->optimizer_before_step(
        before, look.optimizer, optimizer_step_facts(g, ticket, paths_, look.optimizer));
    if (e) g.flagged_unstored = true;  // written even when no call of the step was recorded
    return e;
  });
}

std::optional<OverflowEvent> OverflowGuard::optimizer_gradients(OptimizerLook& look) {
  if (look.bad.empty()) return std::nullopt;
  return locked([&](GuardState& g, const StepTicket& ticket) -> std::optional<OverflowEvent> {
    if (!g.decisions) return std::nullopt;
    OverflowDecisions::GradientSource source;
    source.reduced = look.reduced;
    source.compiled = g.watch && g.watch->compiled_region_ran();
    // Without a started model nothing says whether an earlier step left gradients.
    source.earlier_step_left = g.models.empty() || g.models.earlier_step_left_gradients();
    OverflowFacts blank = optimizer_step_facts(g, ticket, paths_, look.optimizer);
    blank.tensors = std::move(look.bad_tensors);
    std::optional<OverflowEvent> e =
        g.decisions->optimizer_gradients(std::move(look.bad), source, std::move(blank));
    // Written even when no call of the step was recorded: the message names its folder.
    if (e) g.flagged_unstored = true;
    return e;
  });
}

std::optional<OverflowEvent> OverflowGuard::optimizer_update(OptimizerLook& look) {
  if (look.bad.empty()) return std::nullopt;
  return locked([&](GuardState& g, const StepTicket& ticket) -> std::optional<OverflowEvent> {
    if (!g.decisions) return std::nullopt;
    OverflowFacts blank = optimizer_step_facts(g, ticket, paths_, look.optimizer, "after");
    blank.tensors = std::move(look.bad_tensors);
    std::optional<OverflowEvent> e =
        g.decisions->optimizer_update(std::move(look.bad), look.optimizer, std::move(blank));
    if (e) g.flagged_unstored = true;  // no call of the step names it
    return e;
  });
}

std::optional<OverflowEvent> OverflowGuard::optimizer_settings(const OptimizerLook& look) {
  return locked([&](GuardState& g, const StepTicket& ticket) -> std::optional<OverflowEvent> {
    if (!g.decisions || look.settings.empty()) return std::nullopt;
    const OverflowFacts blank = optimizer_step_facts(g, ticket, paths_, look.optimizer);
    for (const auto& [setting, value] : look.settings) {
      OverflowDecisions::BeforeStep before;
      before.setting = setting;
      before.value = value;
      std::optional<OverflowEvent> e =
          g.decisions->optimizer_before_step(before, look.optimizer, blank);
      if (e) {
        g.flagged_unstored = true;  // no call of the step names it
        return e;
      }
    }
    return std::nullopt;
  });
}

}  // namespace msprobe
