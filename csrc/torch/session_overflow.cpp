// The overflow_check side of the session: keeping the tensors of calls with findings, describing
// a stop, and writing overflow_report.json with a one-screen summary.
#include <cstdio>

#include "core/json_writer.h"
#include "core/output_files.h"
#include "core/report.h"
#include "torch/session.h"
#include "torch/tensor_stats.h"

namespace msprobe {

namespace {

std::string shape_text(const at::Tensor& t) {
  std::string s = "[";
  for (size_t i = 0; i < t.sizes().size(); ++i) s += (i ? ", " : "") + std::to_string(t.sizes()[i]);
  return s + "]";
}

// dtype, shape and how many elements are NaN, +inf and -inf (what check_numerics tells).
std::string tensor_facts(const std::string& where, const at::Tensor& t) {
  std::string s = where + ": " + dtype_name(t.scalar_type()) + " " + shape_text(t);
  if (t.is_floating_point() && t.layout() == at::kStrided && !t.is_meta()) {
    const at::Tensor x = t.detach();
    const at::Tensor counts =
        at::stack({at::isnan(x).sum(), at::isposinf(x).sum(), at::isneginf(x).sum()}).cpu();
    const int64_t* c = counts.data_ptr<int64_t>();
    s += ": " + std::to_string(c[0]) + " NaN, " + std::to_string(c[1]) + " +inf, " +
         std::to_string(c[2]) + " -inf";
  }
  return s;
}

std::string scalar_facts(const std::string& where, const Entry& e) {
  if (e.value.kind != Scalar::Kind::Float) return where + ": " + e.type;
  return where + ": " + e.type + " " + format_float(e.value.number);
}

// "a, b, c (and 4 more)": the calls of `findings` whose `pick` is true.
std::string join_calls(const std::vector<Finding>& findings, const std::vector<bool>& pick) {
  std::string s;
  size_t n = 0;
  for (size_t i = 0; i < findings.size(); ++i) {
    if (!pick[i]) continue;
    if (n < 3) s += (n ? ", " : "") + findings[i].call;
    ++n;
  }
  if (n > 3) s += " (and " + std::to_string(n - 3) + " more)";
  return s;
}

}  // namespace

void Session::keep_tensors(StoredCall& call, const LiveTensors& live) {
  CallRecord& rec = call.record;
  const std::string stem = rec.name + ".input.";
  auto keep = [&](Entry& e, const at::Tensor* t, const std::string& name) {
    if (!t || !e.is_tensor() || t->is_meta() || t->layout() != at::kStrided) return;
    e.data_name = name + ".pt";
    call.tensors.emplace_back(t->detach().clone(), e.data_name);
  };
  for (size_t i = 0; i < rec.inputs.size(); ++i) {
    keep(rec.inputs[i], tensor_at(live.inputs, i), stem + std::to_string(i));
  }
  for (size_t j = 0; j < rec.kwargs.size(); ++j) {
    keep(rec.kwargs[j].second, tensor_at(live.kwargs, j),
         rec.name + "." + rec.kwargs[j].first + ".0");
  }
  for (size_t i = 0; i < rec.outputs.size(); ++i) {
    keep(rec.outputs[i], tensor_at(live.outputs, i), rec.name + ".output." + std::to_string(i));
  }
}

OverflowStop Session::describe_stop(const StoredCall& call, const Finding& f,
                                    const LiveTensors& live) {
  OverflowStop stop;
  stop.finding = f;
  stop.module = call.parent ? call.parent : call.module_hint;
  stop.step = step_;
  stop.rank = rank_;
  stop.dump_dir = step_dir();
  if (call.stack)
    stop.source = codes_.first_frame_outside(*call.stack, {package_dir_, library_dir_});
  const CallRecord& rec = call.record;
  const std::string in = rec.uses_input_key ? "input" : "input_args";
  for (size_t i : f.input_indices) {
    const std::string where = in + "[" + std::to_string(i) + "]";
    const at::Tensor* t = tensor_at(live.inputs, i);
    stop.tensors.push_back(t ? tensor_facts(where, *t) : scalar_facts(where, rec.inputs[i]));
  }
  for (size_t j = 0; j < rec.kwargs.size(); ++j) {
    const auto& key = rec.kwargs[j].first;
    if (std::find(f.kwarg_keys.begin(), f.kwarg_keys.end(), key) == f.kwarg_keys.end()) continue;
    const at::Tensor* t = tensor_at(live.kwargs, j);
    stop.tensors.push_back(t ? tensor_facts(key, *t) : scalar_facts(key, rec.kwargs[j].second));
  }
  for (size_t i : f.output_indices) {
    const std::string where = "output[" + std::to_string(i) + "]";
    const at::Tensor* t = tensor_at(live.outputs, i);
    stop.tensors.push_back(t ? tensor_facts(where, *t) : scalar_facts(where, rec.outputs[i]));
  }
  return stop;
}

void Session::write_overflow_files(const std::string& dir) {
  Report report;
  report.findings = watch_->findings();
  report.first_anomaly = watch_->first_flagged();
  write_file_atomic(dir + "/overflow_report.json", report.to_json(1));

  size_t counts[3] = {0, 0, 0};
  for (const Finding& f : report.findings) ++counts[static_cast<int>(f.severity)];
  const std::string who = rank_ >= 0 ? "[rank " + std::to_string(rank_) + "] " : "";
  std::string text = who + "msprobe_cpp: step " + std::to_string(step_) +
                     " flagged: " + std::to_string(report.findings.size()) + " anomalous calls (" +
                     std::to_string(counts[2]) + " critical, " + std::to_string(counts[1]) +
                     " high, " + std::to_string(counts[0]) + " medium)\n";
  if (report.first_anomaly) {
    text += who + "  first anomaly: " + report.first_anomaly->call + " (" +
            to_string(report.first_anomaly->severity) + ", " +
            scene_name(report.first_anomaly->scene) + ")\n";
  }
  const std::vector<bool>& flagged = watch_->flagged();
  for (Severity level : {Severity::Critical, Severity::High, Severity::Medium}) {
    std::vector<bool> pick(flagged.size());
    for (size_t i = 0; i < pick.size(); ++i) {
      pick[i] = flagged[i] && report.findings[i].severity == level;
    }
    const std::string calls = join_calls(report.findings, pick);
    if (!calls.empty()) text += who + "  " + to_string(level) + ": " + calls + "\n";
  }
  std::vector<bool> expected(flagged.size());
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = !flagged[i];
  const std::string calls = join_calls(report.findings, expected);
  if (!calls.empty()) {
    text += who + "  expected (from -inf masks and other deliberate constants): " + calls + "\n";
  }
  text += who + "  dump: " + dir + "  (msprobe-cpp check " + dir + "/dump.json)\n";
  std::fputs(text.c_str(), stderr);
}

}  // namespace msprobe
