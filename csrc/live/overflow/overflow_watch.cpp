#include "live/overflow/overflow_watch.h"

#include <algorithm>

#include "core/anomaly.h"

namespace msprobe {

namespace {

RuleSet rules_of(const Config& config) {
  RuleSet rules = RuleSet::shipped();
  for (const std::string& file : config.overflow_check.rules) rules.add_file(file);
  return rules;
}

// "Torch.nan_to_num.0.forward" -> "Torch.nan_to_num.forward": the call without its counter.
std::string call_site(const std::string& call) {
  std::string site;
  size_t start = 0;
  while (start <= call.size()) {
    size_t dot = call.find('.', start);
    if (dot == std::string::npos) dot = call.size();
    const std::string part = call.substr(start, dot - start);
    const bool counter = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    if (!counter) site += (site.empty() ? "" : ".") + part;
    start = dot + 1;
  }
  return site;
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

}  // namespace

OverflowWatch::OverflowWatch(const Config& config, const ModelTensors& models)
    : detector_(rules_of(config), DetectorOptions{config.overflow_check.mutation_threshold,
                                                  config.overflow_check.compat}),
      options_(config.overflow_check),
      models_(models) {}

void OverflowWatch::new_step() {
  detector_.reset();
  known_.clear();
  compiled_outputs_.clear();
  unexplained_forwards_.clear();
  backward_anomaly_ = false;
  findings_.clear();
  judgements_.clear();
  step_flagged_ = false;
}

void OverflowWatch::mark_compiled_output(const at::Tensor& t) {
  compiled_outputs_.insert_or_assign(t.unsafeGetTensorImpl(), WeakImpl(t.getIntrusivePtr()));
}

void OverflowWatch::remember_outputs(const CallRecord& rec, const LiveTensors& live,
                                     bool explained) {
  for_each_arg(rec, [&](const ArgPos& pos, const Entry& arg) {
    const LiveArg* tensors = live.at(pos);
    if (pos.side != ArgPos::Side::Output || !tensors) return;
    for_each_tensor(arg, *tensors, [&](const Entry& e, const at::Tensor& t) {
      if (!is_anomalous(e, detector_.options().compat)) return;
      known_.insert_or_assign(t.unsafeGetTensorImpl(),
                              Known{WeakImpl(t.getIntrusivePtr()), explained});
    });
  });
}

void OverflowWatch::trace_tensor(const Entry& e, const at::Tensor& t, Traced& out) const {
  if (!is_anomalous(e, detector_.options().compat)) return;
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (auto it = known_.find(impl); it != known_.end() && it->second.weak.lock().get() == impl) {
    if (it->second.explained) {
      out.kinds.add_tensor(e);
    } else {
      out.explained = false;  // downstream of an earlier anomaly
    }
    return;
  }
  // torch.tensor(-inf), x.new_tensor(inf), torch.full((), -inf): a constant in tensor form.
  if (t.numel() == 1 && !kinds_of(e).n[0]) {
    out.kinds.add_constant(e);
    return;
  }
  if (auto p = models_.find(t)) {
    if (p->buffer && (p->never_written || only_minus_inf(e))) {  // a constant mask buffer
      out.kinds.add_tensor(e);
      return;
    }
    out.explained = false;
    if (!out.origin) {
      out.origin = Origin::Parameter;
      out.parameter = p->name;
      out.note = (p->buffer ? "buffer " : "parameter ") + p->name +
                 (p->written_this_step ? " was written during this step"
                                       : " was last written before this step began");
    }
    return;
  }
  // After a backward anomaly, tensors nobody recorded making are its gradients (the optimizer,
  // a loss scaler's unscale_, clip_grad_norm_ read them): downstream, not a new origin.
  if (backward_anomaly_) {
    out.explained = false;
    return;
  }
  // Without one, a parameter's gradient holding NaN/inf was left by an earlier step (one that a
  // loss scaler skipped, or that the program caught a stop in) and is being added onto.
  if (auto p = models_.gradient_of(t)) {
    out.explained = false;
    if (!out.origin) {
      out.origin = Origin::Input;
      out.note = "the gradient of parameter " + *p +
                 " holds NaN/inf from an earlier step: zero it (optimizer.zero_grad()) before this "
                 "step accumulates onto it";
    }
    return;
  }
  // A mask made before the step (an attribute, not a buffer), or a tensor holding one infinity
  // only: what torch.full(..., ±inf) or fill_(±inf) make, which msprobe's wrap list does not
  // record.
  if (only_minus_inf(e) || one_infinity(e)) {
    out.kinds.add_tensor(e);
    return;
  }
  out.explained = false;
  if (out.origin) return;
  if (auto it = compiled_outputs_.find(impl);
      it != compiled_outputs_.end() && it->second.lock().get() == impl) {
    out.origin = Origin::Op;
    out.note =
        "made inside a compiled region (torch.compile), whose calls are not recorded: run the "
        "model uncompiled (its _orig_mod) to find the op";
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
    for_each_tensor(e, *arg, [&](const Entry& x, const at::Tensor& t) { trace_tensor(x, t, out); });
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
                                                 const LiveTensors& live) const {
  bool all_known = true, explained = true;
  for (size_t i : f.output_indices) {
    if (i >= live.outputs.size()) return std::nullopt;
    for_each_tensor(rec.outputs[i], live.outputs[i], [&](const Entry& e, const at::Tensor& t) {
      if (!is_anomalous(e, detector_.options().compat)) return;
      const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
      auto it = known_.find(impl);
      if (it == known_.end() || it->second.weak.lock().get() != impl) {
        all_known = false;
      } else {
        explained = explained && it->second.explained;
      }
    });
  }
  if (!all_known || f.output_indices.empty()) return std::nullopt;
  return explained;
}

// A backward record's `input` holds gradients: anomalous ones came from an earlier backward call.
// Without them the call only inherits its forward's anomaly, and with it the forward's judgement.
bool OverflowWatch::backward_explained(const CallRecord& rec, const Finding& f) const {
  if (!f.input_indices.empty() || !f.kwarg_keys.empty()) return false;
  return !unexplained_forwards_.count(forward_name_of(rec.name));
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
  if (!v.finding) return v;
  const Finding& f = *v.finding;
  const bool raise = options_.action == Action::Raise;
  Judgement judgement = Judgement::Flagged;
  const bool module_forward = !backward && rec.name.rfind("Module.", 0) == 0;
  const std::optional<bool> inner = module_forward ? judged_inside(rec, f, live) : std::nullopt;
  if (inner) {
    if (*inner) judgement = Judgement::Explained;  // else downstream of the inner call's anomaly
  } else if (f.scene == Scene::NumericalMutation) {
    judgement = Judgement::Lead;  // finite data: a lead to the culprit, nothing to trace
  } else if (f.scene == Scene::InputNormalOutputAnomaly) {
    v.origin = peer_rank ? Origin::Peer : Origin::Op;
    if (peer_rank) v.note = "rank " + std::to_string(*peer_rank) + " gave this collective NaN/inf";
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
    } else {
      v.origin = t.origin;
      v.parameter = std::move(t.parameter);
      v.note = std::move(t.note);
      // Foreign NaN/inf that this call turned into finite outputs: absorbed, not an origin.
      if (t.origin && f.scene == Scene::InputAnomalyOutputNormal) judgement = Judgement::Absorbed;
    }
  }
  if (judgement == Judgement::Explained) v.origin.reset();

  if (!backward) remember_outputs(rec, live, judgement == Judgement::Explained);
  if (judgement == Judgement::Flagged) {
    v.flagged = true;
    if (backward) {
      backward_anomaly_ = true;
    } else {
      unexplained_forwards_.insert(rec.name);
    }
  }
  // An absorbed anomaly has no origin of its own: the origin comes where the foreign NaN/inf
  // reaches an output. It flags the step the first time its call site absorbs one, so that a
  // data set with NaN in every batch is dumped and told once, not at every step.
  const bool absorbed = judgement == Judgement::Absorbed;
  if (absorbed) v.flagged = absorbing_sites_.insert(call_site(rec.name)).second;
  const bool level_stop = (!v.origin || absorbed) && judgement != Judgement::Explained &&
                          f.severity >= options_.stop_level;
  if (level_stop) v.flagged = true;
  if (v.origin && backward) {
    v.end_of_backward = true;  // whether it matters is known when the backward pass ends
  } else if (raise) {
    v.stop = v.origin && !absorbed ? options_.stops_on(*v.origin) : level_stop;
  }
  if (v.flagged && judgement == Judgement::Lead) judgement = Judgement::Flagged;
  v.judgement = judgement;
  findings_.push_back(f);
  judgements_.push_back(judgement);
  if (v.flagged) step_flagged_ = true;
  return v;
}

}  // namespace msprobe
