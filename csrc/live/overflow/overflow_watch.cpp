#include "live/overflow/overflow_watch.h"

#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <cmath>

#include "core/anomaly.h"
#include "live/crossing/python_crossing.h"
#include "live/overflow/running_stats.h"

namespace msprobe {

namespace {

RuleSet rules_of(const Config& config) {
  RuleSet rules = RuleSet::shipped();
  for (const std::string& file : config.overflow_check.rules) rules.add_file(file);
  return rules;
}

// Max finite and Min -inf: no NaN, no +inf, some -inf. What a mask holds, and no overflow makes.
bool only_minus_inf(const Entry& e) {
  return e.max.is_number() && std::isfinite(e.max.as_double()) && e.min.is_number() &&
         std::isinf(e.min.as_double()) && e.min.as_double() < 0;
}

// Every element the same infinity (Max == Min == ±inf, so no NaN and nothing finite).
bool one_infinity(const Entry& e) {
  return e.max.is_number() && e.min.is_number() && std::isinf(e.max.as_double()) &&
         e.max.as_double() == e.min.as_double();
}

// Whether `t` is an nn.Parameter: of a module that was not given to start() when no started
// model has it (an EMA copy, a frozen teacher). Asked of anomalous tensors that no call made
// only, on a forward hook's thread, which holds the GIL; without it the answer is no.
bool is_nn_parameter(const at::Tensor& t) {
  if (!ParameterClass || !PyGILState_Check()) return false;  // asked without it: no
  const pybind11::object obj = PythonCrossing::owned(THPVariable_Wrap(t));
  if (!obj) {
    PythonCrossing::drop_error();
    return false;
  }
  const int is = PyObject_IsInstance(obj.ptr(), ParameterClass);
  if (is < 0) PythonCrossing::drop_error();
  return is == 1;
}

}  // namespace

OverflowWatch::OverflowWatch(const Config& config, const ModelTensors& models)
    : detector_(rules_of(config), DetectorOptions{config.overflow_check.mutation_threshold,
                                                  config.overflow_check.compat}),
      options_(config.overflow_check),
      models_(models),
      level_(config.level) {}

void OverflowWatch::new_step() {
  detector_.reset();
  known_.clear();
  compiled_outputs_.clear();
  unexplained_forwards_.clear();
  backward_anomaly_ = false;
  held_.clear();
  findings_.clear();
  judgements_.clear();
  step_flagged_ = false;
}

void OverflowWatch::mark_compiled_output(const at::Tensor& t) {
  compiled_outputs_.insert_or_assign(t.unsafeGetTensorImpl(), WeakImpl(t.getIntrusivePtr()));
}

std::vector<HeldEnd> OverflowWatch::finish_held() {
  std::vector<HeldEnd> ends(held_.size());
  std::vector<uint64_t> latest(held_.size(), 0);
  for (const auto& [impl, k] : known_) {
    if (k.held < 0 || static_cast<size_t>(k.held) >= held_.size()) continue;
    const size_t id = static_cast<size_t>(k.held);
    if (k.order >= latest[id] && k.weak.lock().get() == impl) {
      latest[id] = k.order + 1;
      ends[id].still_in = k.call;
    }
  }
  for (size_t id = 0; id < held_.size(); ++id) {
    const HeldOrigin& h = held_[id];
    if (h.caught) {
      ends[id] = HeldEnd{};
      continue;
    }
    ends[id].turned_finite_by = h.turned_finite_by;
    if (h.finding < judgements_.size()) {
      judgements_[h.finding] =
          ends[id].still_in.empty() ? Judgement::Absorbed : Judgement::HeldToEnd;
    }
  }
  return ends;
}

bool OverflowWatch::held_tensor(const at::Tensor& t) const {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  auto it = known_.find(impl);
  return it != known_.end() && it->second.held >= 0 && it->second.weak.lock().get() == impl;
}

std::string OverflowWatch::damage(const CallRecord& rec, const LiveTensors& live) const {
  if (rec.name.rfind("Distributed.", 0) == 0) return "went into a collective";
  std::string how;
  for_each_arg(rec, [&](const ArgPos& pos, const Entry& arg) {
    const LiveArg* tensors = live.at(pos);
    if (pos.side != ArgPos::Side::Output || !tensors || !how.empty()) return;
    for_each_tensor(arg, *tensors, [&](const Entry& e, const at::Tensor& t) {
      if (!how.empty() || !is_anomalous(e, detector_.options().compat) || held_tensor(t)) return;
      // Written in place into a tensor that held no held NaN/inf before: optimizer state, a
      // parameter or buffer, a tensor the program keeps.
      bool in_place = false;
      for (const std::vector<LiveArg>* side : {&live.inputs, &live.kwargs}) {
        for (const LiveArg& in : *side) {
          in_place = in_place || (in.tensor.defined() && in.tensor.is_same(t));
        }
      }
      if (in_place) {
        how = "was written in place into an existing tensor";
      } else if (t.requires_grad()) {
        how = "entered a tensor that requires grad";
      }
    });
  });
  return how;
}

void OverflowWatch::remember_outputs(const CallRecord& rec, const LiveTensors& live, bool explained,
                                     int held) {
  for_each_arg(rec, [&](const ArgPos& pos, const Entry& arg) {
    const LiveArg* tensors = live.at(pos);
    if (pos.side != ArgPos::Side::Output || !tensors) return;
    for_each_tensor(arg, *tensors, [&](const Entry& e, const at::Tensor& t) {
      if (!is_anomalous(e, detector_.options().compat)) return;
      known_.insert_or_assign(
          t.unsafeGetTensorImpl(),
          Known{WeakImpl(t.getIntrusivePtr()), explained, held, rec.name, known_order_++});
    });
  });
}

void OverflowWatch::trace_tensor(const Entry& e, const at::Tensor& t, const LiveTensors& live,
                                 Traced& out, bool model_output) const {
  if (!is_anomalous(e, detector_.options().compat)) return;
  if (trace_known(e, t, out)) return;
  // torch.tensor(-inf), x.new_tensor(inf), torch.full((), -inf): a constant in tensor form.
  if (t.numel() == 1 && !kinds_of(e).n[0] && !model_output) {
    out.kinds.add_constant(e);
    return;
  }
  if (trace_model_tensor(e, t, out) || trace_gradient(t, out)) return;
  // A mask made before the step (an attribute, not a buffer), or a tensor holding one infinity
  // only: what torch.full(..., ±inf) or fill_(±inf) make, which msprobe's wrap list does not
  // record.
  if (!(model_output && t.numel() == 1) && (only_minus_inf(e) || one_infinity(e))) {
    out.kinds.add_tensor(e);
    return;
  }
  out.explained = false;
  if (!out.origin) trace_unmade(e, t, live, out);
}

// A tensor an earlier call of this step made: explained by it, or downstream of its anomaly.
bool OverflowWatch::trace_known(const Entry& e, const at::Tensor& t, Traced& out) const {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  auto it = known_.find(impl);
  if (it == known_.end() || it->second.weak.lock().get() != impl) return false;
  if (it->second.explained) {
    out.kinds.add_tensor(e);
  } else {
    out.explained = false;  // downstream of an earlier anomaly
    if (it->second.held < 0) {
      out.unheld = true;
    } else if (out.held < 0) {
      out.held = it->second.held;
    }
  }
  return true;
}

// A parameter or buffer of a started model.
bool OverflowWatch::trace_model_tensor(const Entry& e, const at::Tensor& t, Traced& out) const {
  auto p = models_.find(t);
  if (!p) return false;
  // A constant mask buffer: -inf on purpose. NaN never is, and running statistics are state.
  if (p->buffer && !p->running_stat && !kinds_of(e).n[0] &&
      (p->never_written || only_minus_inf(e))) {
    out.kinds.add_tensor(e);
    return true;
  }
  out.explained = false;
  if (out.origin) return true;
  out.origin = Origin::Parameter;
  out.parameter = p->name;
  out.running_stat = p->running_stat;
  if (p->running_stat) {
    out.note = running_stat_text(p->name) + " holds " + kinds_text(kinds_of(e)) +
               " (a checkpoint's, or written before this step)";
  } else {
    out.note = (p->buffer ? "buffer " : "parameter ") + p->name +
               (p->written_this_step ? " was written during this step"
                                     : " was last written before this step began");
  }
  return true;
}

bool OverflowWatch::trace_gradient(const at::Tensor& t, Traced& out) const {
  // After a backward anomaly, tensors nobody recorded making are its gradients (the optimizer,
  // a loss scaler's unscale_, clip_grad_norm_ read them): downstream, not a new origin.
  if (backward_anomaly_) {
    out.explained = false;
    return true;
  }
  // Without one, a parameter's gradient holding NaN/inf was left by an earlier step (one that a
  // loss scaler skipped, or that the program caught a stop in) and is being added onto.
  auto p = models_.gradient_of(t);
  if (!p) return false;
  out.explained = false;
  if (!out.origin && !compiled_outputs_.empty()) {
    out.origin = Origin::Op;
    out.note = "the gradient of parameter " + *p +
               " was made by the backward of a compiled region (torch.compile) that ran in this "
               "step, whose calls are not recorded: run the model uncompiled (its _orig_mod) to "
               "find the op";
  }
  if (!out.origin) {
    out.origin = Origin::Input;
    out.note = "the gradient of parameter " + *p +
               " holds NaN/inf from an earlier step: zero it (optimizer.zero_grad()) before this "
               "step accumulates onto it";
  }
  return true;
}

namespace {

// Whether the tensors hold a kind of non-finite value that `kinds` holds (NaN where it holds NaN,
// an infinity where it holds one). Scanned only here, while an anomaly is traced: never per step.
bool hold_a_kind_of(const std::vector<at::Tensor>& tensors, const KindCounts& kinds) {
  for (const at::Tensor& a : tensors) {
    if (!a.defined() || a.layout() != at::kStrided || a.is_meta() ||
        !(a.is_floating_point() || a.is_complex())) {
      continue;
    }
    if ((kinds.n[0] && at::isnan(a).any().item<bool>()) ||
        ((kinds.n[1] || kinds.n[2]) && at::isinf(a).any().item<bool>())) {
      return true;
    }
  }
  return false;
}

}  // namespace

// What no recorded call of this step made: a compiled region's output, another module's
// parameter, the enclosing code's work at L0, or else what came in (the batch).
void OverflowWatch::trace_unmade(const Entry& e, const at::Tensor& t, const LiveTensors& live,
                                 Traced& out) const {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (auto it = compiled_outputs_.find(impl);
      it != compiled_outputs_.end() && it->second.lock().get() == impl) {
    out.origin = Origin::Op;
    out.note =
        "made inside a compiled region (torch.compile), whose calls are not recorded: run the "
        "model uncompiled (its _orig_mod) to find the op";
    return;
  }
  if (is_nn_parameter(t)) {
    out.origin = Origin::Input;
    out.note = "an nn.Parameter of a module not given to start() (an EMA copy, a frozen teacher?)";
    return;
  }
  // At L0 (and at a started model's output): what no recorded call made and the enclosing code
  // was not given, that code made while it ran.
  if (const LiveTensors::Enclosing* maker = live.maker_of(t)) {
    // The started model's own arguments held it: the code between the modules (a view such as
    // wav2vec2's input_values[:, None], a detector's normalizing transform) only carried the
    // batch's NaN/inf to the first module.
    const LiveTensors::Enclosing& model = live.enclosing.back();
    if (model.started_model && hold_a_kind_of(model.args, kinds_of(e))) {
      out.origin = Origin::Input;
      out.note = model.maker + "'s own arguments (the batch) held " + kinds_text(kinds_of(e)) +
                 "; its code between the modules carried it to this call";
      return;
    }
    out.origin = Origin::Op;
    out.note = "made by the code of " + maker->maker +
               (maker->started_model ? "'s own forward" : "") +
               " between its submodules; record at mix or L1 to see the op";
    return;
  }
  out.origin = Origin::Input;
}

OverflowWatch::Traced OverflowWatch::trace_forward_inputs(const CallRecord& rec, const Finding& f,
                                                          const LiveTensors& live) const {
  Traced out;
  auto trace_arg = [&](const Entry& e, const LiveArg* arg) {
    if (e.kind == Entry::Kind::Object && !e.is_tensor()) {  // a constant, on purpose
      out.kinds.add_constant(e);
      return;
    }
    if (!arg) {
      out.explained = false;
      return;
    }
    for_each_tensor(e, *arg,
                    [&](const Entry& x, const at::Tensor& t) { trace_tensor(x, t, live, out); });
  };
  for_each_arg(rec, [&](const ArgPos& pos, const Entry& e) {
    if (pos.side != ArgPos::Side::Output && f.lists(pos)) trace_arg(e, live.at(pos));
  });
  return out;
}

// At mix, a module's anomalous outputs were made by the calls inside it, judged before it: the
// module takes their judgement (true: all explained). None when some output was made by no
// recorded call (at L0 always): then the module is judged like a call.
std::optional<bool> OverflowWatch::judged_inside(const CallRecord& rec, const Finding& f,
                                                 const LiveTensors& live, int* held) const {
  bool all_known = true, explained = true, unheld = false;
  for (size_t i : f.output_indices) {
    if (i >= live.outputs.size()) return std::nullopt;
    for_each_tensor(rec.outputs[i], live.outputs[i], [&](const Entry& e, const at::Tensor& t) {
      if (!is_anomalous(e, detector_.options().compat)) return;
      const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
      auto it = known_.find(impl);
      if (it == known_.end() || it->second.weak.lock().get() != impl) {
        all_known = false;
      } else if (!it->second.explained) {
        explained = false;
        if (it->second.held < 0) {
          unheld = true;
        } else if (*held < 0) {
          *held = it->second.held;
        }
      }
    });
  }
  if (!all_known || f.output_indices.empty()) return std::nullopt;
  if (unheld) *held = -1;
  return explained;
}

// A backward record's `input` holds gradients: anomalous ones came from an earlier backward call.
// Without them the call only inherits its forward's anomaly, and with it the forward's judgement.
bool OverflowWatch::backward_explained(const CallRecord& rec, const Finding& f) const {
  if (!f.input_indices.empty() || !f.kwarg_keys.empty()) return false;
  return !unexplained_forwards_.count(forward_name_of(rec.name));
}

Verdict OverflowWatch::judge_model_output(const CallRecord& rec, const LiveTensors& live) {
  Verdict v;
  const bool compat = detector_.options().compat;
  Finding f;
  f.call = rec.name;
  Traced t;
  for (size_t i = 0; i < rec.outputs.size() && i < live.outputs.size(); ++i) {
    if (!holds_anomaly(rec.outputs[i], compat)) continue;
    f.output_indices.push_back(i);
    for_each_tensor(rec.outputs[i], live.outputs[i], [&](const Entry& e, const at::Tensor& x) {
      trace_tensor(e, x, live, t, true);
    });
  }
  if (f.output_indices.empty() || t.explained) return v;
  v.finding = f;
  v.judgement = Judgement::Flagged;
  if (t.held >= 0 && !t.origin) {
    HeldOrigin& h = held_[static_cast<size_t>(t.held)];
    if (h.caught) return Verdict{};
    h.caught = true;
    v.caught = static_cast<size_t>(t.held);
    v.caught_how =
        "reached the output of " +
        (live.enclosing.empty() ? std::string("the started model") : live.enclosing.front().maker);
    v.origin = h.origin;
  } else if (t.origin) {
    v.origin = t.origin;
    v.parameter = std::move(t.parameter);
    v.note = std::move(t.note);
    if (*t.origin == Origin::Input) {
      v.note = "the started model returned it as it was given";
    }
  } else {
    return Verdict{};  // downstream of an anomaly already judged
  }
  v.flagged = true;
  step_flagged_ = true;
  if (options_.action == Action::Raise) v.stop = options_.stops_on(*v.origin);
  return v;
}

// The damage rule: NaN/inf in tensors that need no gradient may still be cleaned (a position
// bucket's log(0) cast to long, a mask, the batch before the model). An op or input origin whose
// outputs do no damage is held (v.hold; held_in becomes its id); a call downstream of a hold
// (held_in) either does damage with it (v.caught, the hold's origin) or holds it on (Held).
// `written`: what the call wrote into running statistics, damage of its own.
Judgement OverflowWatch::apply_damage_rule(const CallRecord& rec, const LiveTensors& live,
                                           Verdict& v, int& held_in, const std::string& written,
                                           bool from_peer) {
  if (held_in >= 0) {
    // Finite outputs absorbed it, unless the call carried it to another rank (a send, whose
    // output is nothing): going into a collective is damage whatever comes out.
    const bool collective = rec.name.rfind("Distributed.", 0) == 0;
    std::string how = v.finding->scene == Scene::InputAnomalyOutputNormal && !collective
                          ? std::string()
                          : damage(rec, live);
    if (!written.empty()) how = written;
    HeldOrigin& h = held_[static_cast<size_t>(held_in)];
    if (how.empty()) {
      if (v.finding->scene == Scene::InputAnomalyOutputNormal && h.turned_finite_by.empty()) {
        h.turned_finite_by = rec.name;
      }
      return Judgement::Held;
    }
    h.caught = true;
    v.caught = static_cast<size_t>(held_in);
    v.caught_how = std::move(how);
    v.origin = h.origin;
    held_in = -1;
    return Judgement::Flagged;
  }
  const bool holdable =
      v.origin && (*v.origin == Origin::Op || *v.origin == Origin::Input) && !from_peer;
  if (holdable && written.empty() && damage(rec, live).empty()) {
    held_in = static_cast<int>(held_.size());
    held_.push_back(HeldOrigin{*v.origin, findings_.size(), false, {}});
    v.hold = true;
  }
  return Judgement::Flagged;
}

// Explained, a lead, absorbed, or flagged with its origin (op, peer, input, parameter; none when
// downstream); `held_in` set when the call is downstream of a held NaN/inf.
Judgement OverflowWatch::classify(const CallRecord& rec, const LiveTensors& live,
                                  std::optional<int> peer_rank, Verdict& v, int& held_in) const {
  Judgement judgement = Judgement::Flagged;
  const Finding& f = *v.finding;
  const bool backward = is_backward_name(rec.name);
  const bool module_forward = !backward && is_module_name(rec.name);
  const std::optional<bool> inner =
      module_forward ? judged_inside(rec, f, live, &held_in) : std::nullopt;
  if (inner) {
    // Else downstream of the inner call's anomaly, or of what it holds (held_in).
    if (*inner) judgement = Judgement::Explained;
  } else if (f.scene == Scene::NumericalMutation) {
    judgement = Judgement::Lead;  // finite data: a lead to the culprit, nothing to trace
  } else if (f.scene == Scene::InputNormalOutputAnomaly) {
    v.origin = peer_rank ? Origin::Peer : Origin::Op;
    if (peer_rank) v.note = "rank " + std::to_string(*peer_rank) + " gave this collective NaN/inf";
    // At L0 a module's weights are in no record: a NaN weight is named as at L1 and mix.
    if (module_forward && level_ == Level::L0) {
      if (auto p = models_.nonfinite_under(module_qualname(rec.name))) {
        v.origin = Origin::Parameter;
        v.parameter = *p;
        v.note = "parameter " + *p + " holds NaN/inf";
      }
    }
  } else if (backward) {
    if (backward_explained(rec, f)) judgement = Judgement::Explained;
  } else {
    Traced t = trace_forward_inputs(rec, f, live);
    if (t.explained) {
      // Explained inputs explain what they hold, no more: a fully masked row's NaN, or scores
      // that overflow beside the mask's -inf, are this call's own.
      std::string beyond = t.kinds.unexplained_in(rec, f.output_indices);
      if (beyond.empty()) {
        judgement = Judgement::Explained;
      } else {
        v.origin = Origin::Op;
        v.note = std::move(beyond);
      }
    } else if (t.held >= 0 && !t.unheld && t.origin != Origin::Parameter) {
      held_in = t.held;
    } else {
      v.origin = t.origin;
      v.parameter = std::move(t.parameter);
      v.note = std::move(t.note);
      // Foreign NaN/inf that this call turned into finite outputs: absorbed, not an origin.
      // A running statistic is the model's state: NaN/inf there is damage done, never absorbed.
      // Nor is NaN/inf sent to another rank (a send returns nothing).
      if (t.origin && f.scene == Scene::InputAnomalyOutputNormal && !t.running_stat &&
          rec.name.rfind("Distributed.", 0) != 0) {
        judgement = Judgement::Absorbed;
      }
    }
  }
  if (judgement == Judgement::Explained) v.origin.reset();
  return judgement;
}

Judgement OverflowWatch::settle(const std::string& call, bool backward, Verdict& v,
                                Judgement judgement) {
  if (judgement == Judgement::Flagged) {
    v.flagged = true;
    if (backward) {
      backward_anomaly_ = true;
    } else {
      unexplained_forwards_.insert(call);
    }
  }
  // An absorbed anomaly has no origin of its own: the origin comes where the foreign NaN/inf
  // reaches an output. It flags the step the first time its call site absorbs one, so that a
  // data set with NaN in every batch is dumped and told once, not at every step.
  const bool absorbed = judgement == Judgement::Absorbed;
  if (absorbed) v.flagged = absorbing_sites_.insert(call_site_name(call)).second;
  const bool level_stop = (!v.origin || absorbed) && judgement != Judgement::Explained &&
                          v.finding->severity >= options_.stop_level;
  if (level_stop) v.flagged = true;
  if (v.origin && backward) {
    v.end_of_backward = true;  // whether it matters is known when the backward pass ends
  } else if (options_.action == Action::Raise) {
    v.stop = v.origin && !absorbed ? options_.stops_on(*v.origin) : level_stop;
  }
  return v.flagged && judgement == Judgement::Lead ? Judgement::Flagged : judgement;
}

Verdict OverflowWatch::judge(const CallRecord& rec, const LiveTensors& live,
                             std::optional<int> peer_rank) {
  Verdict v;
  bool filtered = false;
  v.finding = detector_.judge(rec, &filtered);
  const bool backward = is_backward_name(rec.name);
  if (filtered) {
    if (!backward) remember_outputs(rec, live, true);  // an ignore rule says it is expected
    return v;
  }
  // Running statistics are written in place by batch_norm without a version bump, and are in
  // no record's outputs: looked at after the call (train-mode norms, and norm modules at L0).
  std::optional<RunningStatWrite> stat_write;
  if (!backward && (rec.name.find("_norm.") != std::string::npos ||
                    (level_ == Level::L0 && is_module_name(rec.name)))) {
    stat_write = running_stats_written(rec, live);
  }
  if (!v.finding && !stat_write) return v;
  if (stat_write && (!v.finding || v.finding->scene == Scene::InputNormalOutputAnomaly)) {
    return judge_running_stat_write(rec, live, std::move(v), *stat_write);
  }
  int held_in = -1;  // downstream of a held NaN/inf
  Judgement judgement = classify(rec, live, peer_rank, v, held_in);

  if (!backward && judgement == Judgement::Flagged) {
    const std::string written = stat_write ? "was written into " + stat_write->text : "";
    judgement = apply_damage_rule(rec, live, v, held_in, written, peer_rank.has_value());
  }
  if (!backward) {
    remember_outputs(rec, live, judgement == Judgement::Explained,
                     judgement == Judgement::Held || v.hold ? held_in : -1);
  }
  if (v.hold || judgement == Judgement::Held) {
    // A hold is said once per call site if it is absorbed: it flags the step the first time.
    if (v.hold) v.flagged = absorbing_sites_.insert(call_site_name(rec.name)).second;
  } else {
    judgement = settle(rec.name, backward, v, judgement);
  }
  v.judgement = judgement;
  findings_.push_back(*v.finding);
  judgements_.push_back(judgement);
  if (v.flagged) step_flagged_ = true;
  return v;
}

}  // namespace msprobe
