#include "core/overflow_decisions.h"

#include <cmath>

#include "core/json_writer.h"

namespace msprobe {

namespace {

// 65536 rather than 65536.0: loss scales are powers of two.
std::string scale_text(double scale) {
  if (scale == std::floor(scale) && std::fabs(scale) < 1e15) {
    return std::to_string(static_cast<long long>(scale));
  }
  return format_float(scale);
}

}  // namespace

OverflowDecisions::OverflowDecisions(const OverflowSection& options) : options_(options) {}

OverflowDecisions::CallPlan OverflowDecisions::plan_call(const Verdict& v, bool backward) const {
  CallPlan p;
  if (!v.finding) return p;
  if (v.hold) {
    p.path = CallPlan::Path::Hold;
    p.keeps_facts = true;
    return p;
  }
  if (v.caught && *v.caught < held_.size()) {
    p.path = CallPlan::Path::Caught;
    return p;
  }
  if (!backward && pending_backward_ && feeds_collective(*v.finding)) {
    p.path = CallPlan::Path::FedCollective;
    return p;
  }
  p.path = CallPlan::Path::Told;
  // A backward op origin is told at the end of the pass, once it is known whether it mattered.
  // After a backward op origin, what follows in the step (an optimizer or a loss scaler reading
  // the gradients) is its consequence, not the step's story.
  // An absorbed anomaly is no overflow: no on_overflow, no debugger.overflow; the step's first
  // one is told in one line and kept for the report.
  const bool absorbed = v.judgement == Judgement::Absorbed && !v.stop;
  // In a step whose loss a scaler scaled, non-finite gradients are the scaler's to skip: a
  // backward finding waits for step() (an op origin waits for the end of the pass first). A
  // GradScaler under autocast overflows in casts that no hooked call makes, so the first
  // anomalous backward record often has no origin of its own.
  const bool scaled_backward =
      loss_scaled_ && !v.end_of_backward && v.flagged && !v.stop && backward;
  p.notify = v.flagged && !absorbed && !v.end_of_backward && !scaled_backward && !step_overflow_ &&
             !pending_backward_ && !reached_gradients_;
  p.first_backward = v.end_of_backward && !pending_backward_;
  p.first_scaled = scaled_backward && !reached_gradients_ && !pending_backward_;
  p.first_absorbed = absorbed && v.flagged && !step_absorbed_;
  p.told = p.notify || v.stop || p.first_backward || p.first_absorbed;
  p.keeps_facts = p.told || p.first_scaled;
  return p;
}

bool OverflowDecisions::keeps_facts(const Verdict& v, bool backward) const {
  return plan_call(v, backward).keeps_facts;
}

CallDecision OverflowDecisions::on_call(const Verdict& v, bool backward,
                                        std::optional<OverflowFacts> facts) {
  const CallPlan p = plan_call(v, backward);
  CallDecision d;
  if (p.keeps_facts && !facts) {
    // The caller did not build what keeps_facts() asked for: the finding alone, not nothing.
    facts.emplace();
    facts->finding = *v.finding;
  }
  switch (p.path) {
    case CallPlan::Path::Clean:
      return d;
    case CallPlan::Path::Hold: {
      Held h{std::move(*facts), v.flagged, false};
      h.facts.held = true;
      held_.push_back(std::move(h));
      d.keep_tensors = budget_left();
      d.wants_source = true;
      return d;
    }
    case CallPlan::Path::Caught:
      return on_caught(v);
    case CallPlan::Path::FedCollective:
      return on_fed_collective(v);
    case CallPlan::Path::Told:
      break;
  }
  // Explained calls (every masked score of a causal model) are no evidence: their tensors are
  // not kept, which also keeps the explained path as cheap as the clean one.
  d.keep_tensors = v.judgement != Judgement::Explained && budget_left();
  OverflowEvent e;
  if (v.end_of_backward) {
    e.queue_end_of_backward = !end_of_backward_queued_;
    end_of_backward_queued_ = true;
  }
  e.notify = p.notify;
  e.raise = v.stop;
  if (p.first_scaled) reached_gradients_ = *facts;
  if (p.told) {
    e.facts = std::move(*facts);
    if (p.first_backward) pending_backward_ = e.facts;
    if (e.notify) step_overflow_ = e.facts;
    if (p.first_absorbed) step_absorbed_ = e.facts;
  }
  d.tell_absorbed = p.first_absorbed;
  if (e.notify || e.raise || e.queue_end_of_backward) d.event = std::move(e);
  d.wants_source = d.event || p.first_absorbed || p.first_scaled;
  return d;
}

bool OverflowDecisions::feeds_collective(const Finding& f) const {
  // In a scaled step, non-finite gradients going into DDP's all-reduce are the loss scaler's to
  // skip, on every rank alike.
  return !loss_scaled_ && f.call.rfind("Distributed.", 0) == 0 &&
         (!f.input_indices.empty() || !f.kwarg_keys.empty());
}

CallDecision OverflowDecisions::on_fed_collective(const Verdict& v) {
  // A backward op origin waits for the end of its pass to know whether it reached a gradient.
  // Going into a collective (FSDP's reduce-scatter of the gradients, a pipeline stage sending
  // one back) is damage at once: the other ranks stop there with this rank as their peer, and
  // would never let this rank's pass end.
  CallDecision d;
  OverflowEvent e;
  e.facts = std::move(*pending_backward_);
  pending_backward_.reset();
  e.facts.caught.call = v.finding->call;
  e.facts.caught.how = "went into a collective";
  e.notify = !step_overflow_;
  if (e.notify) step_overflow_ = e.facts;
  e.raise = options_.action == Action::Raise && options_.stops_on(Origin::Op);
  d.keep_tensors = budget_left();
  if (e.notify || e.raise) d.event = std::move(e);
  return d;
}

CallDecision OverflowDecisions::on_caught(const Verdict& v) {
  CallDecision d;
  Held& h = held_[*v.caught];
  h.caught = true;
  OverflowEvent e;
  e.facts = h.facts;
  e.facts.caught.call = v.finding->call;
  e.facts.caught.how = v.caught_how;
  e.notify = !step_overflow_ && !pending_backward_ && !reached_gradients_;
  e.raise = v.stop;
  if (e.notify) step_overflow_ = e.facts;
  d.keep_tensors = budget_left();
  if (e.notify || e.raise) d.event = std::move(e);
  return d;
}

std::vector<std::string> OverflowDecisions::finish_held(const std::vector<HeldEnd>& ends) {
  std::vector<std::string> lines;
  for (size_t i = 0; i < held_.size(); ++i) {
    Held& h = held_[i];
    if (h.caught || !h.tell) continue;
    const HeldEnd end = i < ends.size() ? ends[i] : HeldEnd{};
    // Still in a tensor the program holds: not absorbed, whatever else turned finite on the way.
    std::string how;
    if (!end.still_in.empty()) {
      how = "it is still held at the end of the step, in the output of " + end.still_in +
            " (a metric, an inference output, or what a model not given to start() returned?)";
    } else if (!end.turned_finite_by.empty()) {
      how = "it was turned finite by " + end.turned_finite_by;
    } else {
      how = "it was let go: no tensor holds it at the end of the step";
    }
    h.facts.note = h.facts.note.empty() ? how : h.facts.note + "; " + how;
    h.facts.absorbed = end.still_in.empty();
    if (!step_absorbed_) step_absorbed_ = h.facts;
    lines.push_back(h.facts.absorbed_line());
    h.tell = false;  // a step started again after stop() goes on with the same holds
  }
  return lines;
}

bool OverflowDecisions::backward_pass_ended() {
  end_of_backward_queued_ = false;
  return pending_backward_.has_value();
}

std::optional<OverflowEvent> OverflowDecisions::backward_verdict(
    bool models_known, std::vector<std::string> gradients) {
  if (!pending_backward_) return std::nullopt;
  OverflowEvent e;
  e.facts = std::move(*pending_backward_);
  pending_backward_.reset();
  OverflowFacts& facts = e.facts;
  if (!models_known) {
    facts.note =
        "no model was given to start(): a backward anomaly counts as reaching the "
        "parameter gradients";
  } else {
    facts.gradients.parameters = std::move(gradients);
    if (facts.gradients.parameters.empty()) {
      facts.gradients.masked = true;
      facts.note = kMaskedNote;
    }
  }
  if (!facts.gradients.masked && loss_scaled_) {
    // The loss scaler is expected to skip this step; step() hears whether it did.
    if (!reached_gradients_) reached_gradients_ = facts;
    return std::nullopt;
  }
  e.notify = !step_overflow_;
  if (e.notify) step_overflow_ = facts;
  e.raise =
      !facts.gradients.masked && options_.action == Action::Raise && options_.stops_on(Origin::Op);
  if (!e.notify && !e.raise) return std::nullopt;
  return e;
}

ScaleDecision OverflowDecisions::loss_scale(double before, double after, bool skipped,
                                            int64_t step, const OverflowFacts& blank) {
  ScaleDecision d;
  auto base = [&]() {
    if (reached_gradients_) return *reached_gradients_;
    if (step_overflow_) return *step_overflow_;
    return blank;
  };
  OverflowEvent e;
  if (after < options_.min_loss_scale) {
    e.facts = base();
    e.facts.note = "the loss scale fell to " + scale_text(after) + ", below min_loss_scale " +
                   format_float(options_.min_loss_scale) + ": the gradients overflow even unscaled";
  } else if (after < before || skipped) {
    skipped_by_scaler_ = true;
    d.say = "msprobe_cpp: step " + std::to_string(step) + ": gradients overflowed at scale " +
            scale_text(before) + "; the loss scaler skipped the step" +
            (after < before ? "" : " (its scale held: hysteresis)");
    return d;
  } else if (reached_gradients_) {
    e.facts = *reached_gradients_;
    e.facts.note = "the loss scale did not drop (" + scale_text(after) +
                   "): the loss scaler missed these non-finite gradients";
  } else {
    return d;
  }
  e.notify = !step_overflow_;
  if (e.notify) step_overflow_ = e.facts;
  e.raise = options_.action == Action::Raise;
  d.event = std::move(e);
  return d;
}

std::optional<OverflowEvent> OverflowDecisions::optimizer_gradients(
    std::vector<std::string> gradients, GradientSource source, const OverflowFacts& blank) {
  OverflowEvent e;
  if (reached_gradients_) {
    e.facts = *reached_gradients_;
    e.facts.note =
        "the optimizer steps with these non-finite gradients: the loss scaler did not "
        "skip the step";
    e.raise = options_.action == Action::Raise;
  } else if (pending_backward_ || (step_overflow_ && step_overflow_->origin)) {
    return std::nullopt;  // an origin told already (stop_on and action decided its stop)
  } else {
    // Nothing told, or only calls downstream of NaN/inf whose origin no hook saw (a backward
    // record fed by an unrecorded backward): the gradients' own finding, named here.
    e.facts = blank;
    const std::string which =
        "the gradients of " + gradients.front() +
        (gradients.size() > 1 ? " and " + std::to_string(gradients.size() - 1) + " more"
                              : std::string());
    if (source.reduced) {
      e.facts.origin = Origin::Peer;
      e.facts.note = which +
                     ", averaged across the ranks, hold NaN/inf that no rank said it made: a "
                     "backward no hook sees (a compiled region), or the reduction overflowed";
    } else if (source.compiled) {
      e.facts.origin = Origin::Op;
      e.facts.note = which +
                     " were made by the backward of a compiled region (torch.compile), whose "
                     "calls are not recorded: run the model uncompiled (its _orig_mod) to find "
                     "the op";
    } else if (source.earlier_step_left) {
      e.facts.origin = Origin::Input;
      e.facts.note = which +
                     " hold NaN/inf that no recorded backward call of this step made: left by an "
                     "earlier step (zero them with optimizer.zero_grad()), or made by a backward "
                     "that no hook records (a C++ autograd function)";
    } else {
      // No earlier step of this debugger left gradients: this step's backward made them.
      e.facts.origin = Origin::Op;
      e.facts.note = which +
                     " hold NaN/inf that no recorded backward call of this step made: made by a "
                     "backward that no hook records (the code between modules at L0, a C++ "
                     "autograd function); record at L1 to see the op";
    }
    e.raise = options_.action == Action::Raise && options_.stops_on(*e.facts.origin);
  }
  e.facts.gradients.parameters = std::move(gradients);
  e.notify = !step_overflow_;
  if (e.notify) step_overflow_ = e.facts;
  return e;
}

std::optional<OverflowEvent> OverflowDecisions::optimizer_before_step(const BeforeStep& before,
                                                                      const std::string& optimizer,
                                                                      const OverflowFacts& blank) {
  const bool setting = !before.setting.empty();
  if (setting && std::isfinite(before.value)) return std::nullopt;
  if (step_overflow_ && step_overflow_->origin) return std::nullopt;  // its stop was decided
  OverflowEvent e;
  e.facts = blank;
  if (setting) {
    e.facts.finding.scene = Scene::InputNormalOutputAnomaly;
    e.facts.finding.severity = scene_severity(Scene::InputNormalOutputAnomaly);
    e.facts.origin = Origin::Op;
    const char* shown = std::isnan(before.value) ? "nan" : before.value > 0 ? "inf" : "-inf";
    e.facts.note = optimizer + "'s " + before.setting + " is " + shown +
                   ": its step would write NaN/inf into every parameter it updates; stopped "
                   "before the step, the parameters and the optimizer's state untouched";
    return told_at_optimizer(std::move(e));
  }
  // NaN/inf in, and the step about to write it into the parameters.
  e.facts.finding.scene = Scene::InputAnomalyOutputAnomaly;
  e.facts.finding.severity = Severity::High;
  e.facts.origin = Origin::Parameter;
  e.facts.parameter = before.parameter;
  e.facts.optimizer_state = before.state;
  e.facts.note = "the optimizer's " + before.state + " of " + before.parameter +
                 (before.more ? " (and " + std::to_string(before.more) + " more state tensors)"
                              : std::string()) +
                 " holds NaN/inf, written before this step (a checkpoint's optimizer state, or "
                 "an earlier update); stopped before the parameters take it";
  return told_at_optimizer(std::move(e));
}

std::optional<OverflowEvent> OverflowDecisions::optimizer_update(std::vector<std::string> written,
                                                                 const std::string& optimizer,
                                                                 const OverflowFacts& blank) {
  if (step_overflow_ && step_overflow_->origin) return std::nullopt;  // its stop was decided
  OverflowEvent e;
  e.facts = blank;
  e.facts.finding.scene = Scene::InputNormalOutputAnomaly;
  e.facts.finding.severity = scene_severity(Scene::InputNormalOutputAnomaly);
  e.facts.origin = Origin::Op;
  e.facts.parameter = written.front();
  e.facts.note = optimizer + ".step wrote NaN/inf into " + written.front() +
                 (written.size() > 1 ? " and " + std::to_string(written.size() - 1) + " more"
                                     : std::string()) +
                 ", whose gradients and state were finite before it: its own arithmetic made "
                 "them (eps, lr, weight decay?); its calls are looked at once after the step, "
                 "not one by one (docs/overflow-detection.md)";
  return told_at_optimizer(std::move(e));
}

OverflowEvent OverflowDecisions::told_at_optimizer(OverflowEvent e) {
  e.notify = !step_overflow_;
  if (e.notify) step_overflow_ = e.facts;
  e.raise = options_.action == Action::Raise && options_.stops_on(*e.facts.origin);
  return e;
}

bool OverflowDecisions::budget_left() const {
  const int64_t nums = options_.overflow_nums;
  return nums < 0 || step_dumped_ || dumped_steps_ < nums;
}

DumpDecision OverflowDecisions::dump_step(bool flagged, bool peer_stop, int64_t step) {
  DumpDecision d;
  if (peer_stop) {  // the evidence of every rank is the point of a peer stop
    d.dump = true;
    return d;
  }
  // A finding told without a judged call (the optimizer-step gate) flags the step too: its
  // message names the folder.
  if (!flagged && !step_overflow_) return d;
  if (skipped_by_scaler_ && !options_.dump_skipped_steps) return d;
  if (!budget_left()) {
    if (!said_no_more_dumps_) {
      d.say = "msprobe_cpp: step " + std::to_string(step) + " flagged; overflow_nums (" +
              std::to_string(options_.overflow_nums) +
              ") reached: no more dumps are written, detection goes on";
      said_no_more_dumps_ = true;
    }
    return d;
  }
  d.dump = true;
  // A step flagged only by absorbed NaN/inf (told once per call site, so a bounded number of
  // them) is dumped without using up overflow_nums: T5's step 0 must not take the dump of a real
  // stop later in the run.
  if (!step_overflow_ && !reached_gradients_ && !pending_backward_ && step_absorbed_) return d;
  if (!step_dumped_) ++dumped_steps_;
  step_dumped_ = true;
  return d;
}

std::optional<OverflowFacts> OverflowDecisions::first_anomaly() const {
  if (step_overflow_) return step_overflow_;
  if (reached_gradients_) return reached_gradients_;
  return step_absorbed_;
}

std::string OverflowDecisions::absorbed_line() const {
  return step_absorbed_ ? step_absorbed_->absorbed_line() : std::string();
}

void OverflowDecisions::set_source(const std::string& call,
                                   const std::optional<std::string>& source) {
  for (auto* kept : {&pending_backward_, &step_overflow_, &step_absorbed_, &reached_gradients_}) {
    if (*kept && !(*kept)->source && (*kept)->finding.call == call) (*kept)->source = source;
  }
  for (Held& h : held_) {
    if (!h.facts.source && h.facts.finding.call == call) h.facts.source = source;
  }
}

void OverflowDecisions::complete(const OverflowFacts& stop) {
  set_source(stop.finding.call, stop.source);
  for (auto* kept : {&step_overflow_, &pending_backward_, &reached_gradients_}) {
    if (!*kept || (*kept)->finding.call != stop.finding.call) continue;
    (*kept)->raised_calls_later = stop.raised_calls_later;
    (*kept)->replay = stop.replay;
  }
}

void OverflowDecisions::new_step() {
  step_overflow_.reset();
  step_absorbed_.reset();
  pending_backward_.reset();
  reached_gradients_.reset();
  held_.clear();
  end_of_backward_queued_ = false;
  loss_scaled_ = false;
  skipped_by_scaler_ = false;
  step_dumped_ = false;
}

}  // namespace msprobe
