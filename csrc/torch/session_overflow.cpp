// The overflow_check side of the session: keeping the tensors of calls with findings, describing
// a flagged call, the end-of-backward and loss-scaler verdicts, and writing overflow_report.json
// with a one-screen summary.
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/anomaly.h"
#include "core/json_writer.h"
#include "core/output_files.h"
#include "core/report.h"
#include "torch/session.h"
#include "torch/tensor_stats.h"

namespace msprobe {

namespace {

// dtype, shape and how many elements are NaN, +inf and -inf (what check_numerics tells).
ArgFacts tensor_facts(const std::string& where, const at::Tensor& t) {
  ArgFacts a;
  a.position = where;
  a.type = "torch.Tensor";
  a.dtype = dtype_name(t.scalar_type());
  a.shape.assign(t.sizes().begin(), t.sizes().end());
  if (t.is_floating_point() && t.layout() == at::kStrided && !t.is_meta()) {
    const at::Tensor x = t.detach();
    const at::Tensor counts =
        at::stack({at::isnan(x).sum(), at::isposinf(x).sum(), at::isneginf(x).sum()}).cpu();
    const int64_t* c = counts.data_ptr<int64_t>();
    a.counted = true;
    a.nan = c[0];
    a.posinf = c[1];
    a.neginf = c[2];
  }
  return a;
}

ArgFacts scalar_facts(const std::string& where, const Entry& e) {
  ArgFacts a;
  a.position = where;
  a.type = e.type.empty() ? "null" : e.type;
  if (e.value.kind == Scalar::Kind::Float) a.value = e.value.number;
  return a;
}

// The facts of one anomalous argument: the tensor, or each anomalous tensor inside a list.
void arg_facts(const std::string& where, const Entry& e, const LiveArg* live, bool compat,
               std::vector<ArgFacts>& out) {
  if (e.kind == Entry::Kind::Object && !e.is_tensor()) {
    out.push_back(scalar_facts(where, e));
    return;
  }
  if (!live) return;
  if (e.is_tensor()) {
    if (live->tensor.defined()) out.push_back(tensor_facts(where, live->tensor));
    return;
  }
  size_t k = 0;
  for_each_tensor(e, *live, [&](const Entry& x, const at::Tensor& t) {
    if (is_anomalous(x, compat))
      out.push_back(tensor_facts(where + "[" + std::to_string(k) + "]", t));
    ++k;
  });
}

const LiveArg* live_at(const std::vector<LiveArg>& v, size_t i) {
  return i < v.size() ? &v[i] : nullptr;
}

// "a, b, c (and 4 more)": the calls of `findings` whose judgement is `which`.
std::string join_calls(const std::vector<Finding>& findings, const std::vector<Judgement>& j,
                       Judgement which, std::optional<Severity> level = std::nullopt) {
  std::string s;
  size_t n = 0;
  for (size_t i = 0; i < findings.size(); ++i) {
    if (j[i] != which || (level && findings[i].severity != *level)) continue;
    if (n < 3) s += (n ? ", " : "") + findings[i].call;
    ++n;
  }
  if (n > 3) s += " (and " + std::to_string(n - 3) + " more)";
  return s;
}

// 65536 rather than 65536.0: loss scales are powers of two.
std::string scale_text(double scale) {
  if (scale == std::floor(scale) && std::fabs(scale) < 1e15) {
    return std::to_string(static_cast<long long>(scale));
  }
  return format_float(scale);
}

}  // namespace

bool Session::dump_budget_left() const {
  const int64_t nums = config_.overflow_check.overflow_nums;
  return nums < 0 || step_dumped_ || dumped_steps_ < nums;
}

bool Session::should_dump_step() {
  if (peer_stop_) return true;  // the evidence of every rank is the point of a peer stop
  if (!watch_->step_flagged()) return false;
  if (skipped_by_scaler_ && !config_.overflow_check.dump_skipped_steps) return false;
  if (!dump_budget_left()) {
    if (!said_no_more_dumps_) {
      std::fprintf(stderr,
                   "msprobe_cpp: step %lld flagged; overflow_nums (%lld) reached: no more dumps "
                   "are written, detection goes on\n",
                   static_cast<long long>(step_),
                   static_cast<long long>(config_.overflow_check.overflow_nums));
      said_no_more_dumps_ = true;
    }
    return false;
  }
  if (!step_dumped_) ++dumped_steps_;
  step_dumped_ = true;
  return true;
}

bool Session::step_flagged() const {
  return watch_ && watch_->step_flagged();
}

void Session::keep_tensors(StoredCall& call, const LiveTensors& live) {
  CallRecord& rec = call.record;
  const std::string in = file_stem(rec.name, "input");
  const std::string out = file_stem(rec.name, "output");
  auto keep = [&](Entry& e, const at::Tensor* t, const std::string& name) {
    if (!t || !e.is_tensor() || t->is_meta() || t->layout() != at::kStrided) return;
    e.data_name = file_names_.claim(name) + ".pt";
    call.tensors.emplace_back(t->detach().clone(), e.data_name);
  };
  for (size_t i = 0; i < rec.inputs.size(); ++i) {
    keep(rec.inputs[i], tensor_at(live.inputs, i), item_file_stem(in, i));
  }
  for (size_t j = 0; j < rec.kwargs.size(); ++j) {
    keep(rec.kwargs[j].second, tensor_at(live.kwargs, j),
         kwarg_file_stem(rec.name, rec.kwargs[j].first));
  }
  for (size_t i = 0; i < rec.outputs.size(); ++i) {
    keep(rec.outputs[i], tensor_at(live.outputs, i), item_file_stem(out, i));
  }
}

OverflowFacts Session::describe_overflow(const StoredCall& call, const Verdict& v,
                                         const LiveTensors& live) {
  OverflowFacts facts;
  const Finding& f = *v.finding;
  facts.finding = f;
  facts.origin = v.origin;
  facts.parameter = v.parameter;
  facts.note = v.note;
  facts.absorbed = v.judgement == Judgement::Absorbed;
  facts.module = call.parent ? call.parent : call.module_hint;
  facts.step = step_;
  facts.rank = folder_rank();
  if (dump_budget_left()) facts.dump_dir = step_dir();
  // The source line is added by add(), outside the lock (it needs the GIL).
  const CallRecord& rec = call.record;
  const bool compat = config_.overflow_check.compat;
  const std::string in = rec.uses_input_key ? "input" : "input_args";
  for (size_t i : f.input_indices) {
    arg_facts(in + "[" + std::to_string(i) + "]", rec.inputs[i], live_at(live.inputs, i), compat,
              facts.tensors);
  }
  for (size_t j = 0; j < rec.kwargs.size(); ++j) {
    const auto& key = rec.kwargs[j].first;
    if (std::find(f.kwarg_keys.begin(), f.kwarg_keys.end(), key) == f.kwarg_keys.end()) continue;
    arg_facts(key, rec.kwargs[j].second, live_at(live.kwargs, j), compat, facts.tensors);
  }
  for (size_t i : f.output_indices) {
    arg_facts("output[" + std::to_string(i) + "]", rec.outputs[i], live_at(live.outputs, i), compat,
              facts.tensors);
  }
  return facts;
}

std::optional<OverflowEvent> Session::end_of_backward() {
  std::lock_guard<std::mutex> lock(mu_);
  end_of_backward_queued_ = false;
  if (!watch_ || !pending_backward_) return std::nullopt;
  OverflowEvent e;
  e.facts = std::move(*pending_backward_);
  pending_backward_.reset();
  OverflowFacts& facts = e.facts;
  if (models_.empty()) {
    facts.note =
        "no model was given to start(): a backward anomaly counts as reaching the "
        "parameter gradients";
  } else {
    facts.gradients = models_.non_finite_gradients();
    if (facts.gradients.empty()) {
      facts.masked = true;
      facts.note = kMaskedNote;
    }
  }
  if (!facts.masked && loss_scaled_) {
    // The loss scaler is expected to skip this step; step() hears whether it did.
    if (!reached_gradients_) reached_gradients_ = facts;
    return std::nullopt;
  }
  e.notify = !step_overflow_;
  if (e.notify) step_overflow_ = facts;
  e.raise = !facts.masked && config_.overflow_check.action == Action::Raise &&
            config_.overflow_check.stops_on(Origin::Op);
  if (!e.notify && !e.raise) return std::nullopt;
  return e;
}

std::optional<OverflowEvent> Session::judge_loss_scale(double before, double after) {
  if (!watch_) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  const OverflowSection& o = config_.overflow_check;
  auto base = [&]() {
    if (reached_gradients_) return *reached_gradients_;
    if (step_overflow_) return *step_overflow_;
    OverflowFacts f;
    f.finding.call = "(loss scaler)";
    f.step = step_;
    f.rank = folder_rank();
    if (dump_budget_left()) f.dump_dir = step_dir();
    return f;
  };
  OverflowEvent e;
  if (after < o.min_loss_scale) {
    e.facts = base();
    e.facts.note = "the loss scale fell to " + scale_text(after) + ", below min_loss_scale " +
                   format_float(o.min_loss_scale) + ": the gradients overflow even unscaled";
  } else if (after < before) {
    skipped_by_scaler_ = true;
    std::fprintf(stderr,
                 "msprobe_cpp: step %lld: gradients overflowed at scale %s; the loss scaler "
                 "skipped the step\n",
                 static_cast<long long>(step_), scale_text(before).c_str());
    return std::nullopt;
  } else if (reached_gradients_) {
    e.facts = *reached_gradients_;
    e.facts.note = "the loss scale did not drop (" + scale_text(after) +
                   "): the loss scaler missed these non-finite gradients";
  } else {
    return std::nullopt;
  }
  e.notify = !step_overflow_;
  if (e.notify) step_overflow_ = e.facts;
  e.raise = o.action == Action::Raise;
  return e;
}

void Session::write_overflow_files(const std::string& dir, std::vector<std::string>& written) {
  Report report;
  report.findings = watch_->findings();
  report.first_anomaly = first_anomaly();
  report.peer_stop = peer_stop_;
  write_file_atomic(dir + "/overflow_report.json", report.to_json(1));
  written.push_back(dir + "/overflow_report.json");
}

std::optional<OverflowFacts> Session::first_anomaly() const {
  if (step_overflow_) return step_overflow_;
  if (reached_gradients_) return reached_gradients_;
  return step_absorbed_;
}

void Session::print_overflow_summary(const std::string& dump) const {
  const std::vector<Finding>& findings = watch_->findings();
  const std::optional<OverflowFacts> first = first_anomaly();
  size_t counts[3] = {0, 0, 0};
  for (const Finding& f : findings) ++counts[static_cast<int>(f.severity)];
  const std::string who = rank_ >= 0 ? "[rank " + std::to_string(rank_) + "] " : "";
  std::string text =
      who + "msprobe_cpp: step " + std::to_string(step_) +
      (peer_stop_
           ? " written for a peer stop (rank " + std::to_string(peer_stop_->rank) + " overflowed): "
           : " flagged: ") +
      std::to_string(findings.size()) + " anomalous calls (" + std::to_string(counts[2]) +
      " critical, " + std::to_string(counts[1]) + " high, " + std::to_string(counts[0]) +
      " medium)" + (rank_ >= 0 ? " on this rank\n" : "\n");
  if (first) {
    text += who + "  first anomaly: " + first->finding.call + " (" +
            to_string(first->finding.severity) + ", " + scene_name(first->finding.scene);
    if (first->origin) text += std::string(", origin ") + to_string(*first->origin);
    if (first->absorbed) text += ", absorbed: no stop";
    text += ")\n";
    if (!first->note.empty()) text += who + "    " + first->note + "\n";
    if (first->source) text += who + "    source: " + *first->source + "\n";
    for (const ArgFacts& t : first->tensors) text += who + "    " + t.text() + "\n";
  }
  const std::vector<Judgement>& j = watch_->judgements();
  for (Severity level : {Severity::Critical, Severity::High, Severity::Medium}) {
    const std::string calls = join_calls(findings, j, Judgement::Flagged, level);
    if (!calls.empty()) text += who + "  " + to_string(level) + ": " + calls + "\n";
  }
  const std::string leads = join_calls(findings, j, Judgement::Lead);
  if (!leads.empty()) {
    text += who +
            "  leads (finite values that jumped by more than the mutation threshold): " + leads +
            "\n";
  }
  const std::string absorbed = join_calls(findings, j, Judgement::Absorbed);
  if (!absorbed.empty()) {
    text += who + "  absorbed (foreign NaN/inf turned finite, no stop): " + absorbed + "\n";
  }
  const std::string expected = join_calls(findings, j, Judgement::Explained);
  if (!expected.empty()) {
    text += who + "  expected (from -inf masks and other deliberate constants): " + expected + "\n";
  }
  text += who + "  dump: " + dump + "\n";
  std::fputs(text.c_str(), stderr);
}

}  // namespace msprobe

namespace msprobe {

std::string Session::stop_for_peer(const PeerStop& peer) {
  if (!watch_) return "";
  const std::string dir = step_dir();
  peer_stop_ = peer;
  dirty_ = true;  // written even when this rank collected nothing yet
  end_step_for_raise();
  peer_stop_.reset();
  std::error_code ec;
  return std::filesystem::exists(dir + "/dump.json", ec) ? dir : "";
}

}  // namespace msprobe
