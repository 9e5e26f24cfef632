#include "core/overflow_facts.h"

#include <cstdio>

#include <algorithm>

#include "core/anomaly.h"

namespace msprobe {

namespace {

void write_indices(JsonWriter& w, const char* key, const std::vector<size_t>& indices) {
  w.key(key);
  w.begin_array();
  for (size_t i : indices) w.value_int(static_cast<int64_t>(i));
  w.end_array();
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void write_optional_string(JsonWriter& w, const char* key, const std::optional<std::string>& v) {
  w.key(key);
  if (v) {
    w.value_string(*v);
  } else {
    w.value_null();
  }
}

// "op (this call made NaN/inf from finite inputs)": the origin and what it means here.
std::string origin_words(const OverflowFacts& f) {
  const std::string name = to_string(*f.origin);
  switch (*f.origin) {
    case Origin::Op:
      return name + " (this call made NaN/inf from finite inputs)";
    case Origin::Input:
      return name +
             " (NaN/inf came in with a tensor argument that no call of this step made: the batch?)";
    case Origin::Parameter:
      return name + (f.optimizer_state
                         ? " (NaN/inf came in with the optimizer's state: " + *f.optimizer_state +
                               " of parameter " + f.parameter.value_or("?") + ")"
                         : " (NaN/inf came in with parameter " + f.parameter.value_or("?") + ")");
    case Origin::Peer:
      return name + " (NaN/inf came from another rank through this collective)";
  }
  return name;
}

// "step 6 50%, step 7 90% of float16's range: grew".
std::string history_text(const HeadroomTrend& trend) {
  std::string text;
  for (size_t i = 0; i < trend.history.size(); ++i) {
    const HeadroomPoint& p = trend.history[i];
    char buf[64];
    std::snprintf(buf, sizeof buf, "%sstep %lld %.0f%%", i ? ", " : "",
                  static_cast<long long>(p.step), p.fraction * 100.0);
    text += buf;
  }
  return text + " of " + trend.dtype.substr(trend.dtype.rfind('.') + 1) + "'s range: " + trend.text;
}

// Where the step's files went, or why there are none.
std::string dump_words(const OverflowFacts& f) {
  if (!f.dump.error.empty()) return "not written: " + f.dump.error;
  if (f.dump.dir.empty()) return "none (overflow_nums reached: no more dumps are written)";
  return f.dump.dir + "  (overflow_report.json, dump.json, dump_tensor_data/)";
}

void write_caught(JsonWriter& w, const OverflowFacts& f) {
  w.key("held");
  w.value_bool(true);
  w.key("caught");
  if (f.caught.call.empty()) {
    w.value_null();
    return;
  }
  w.begin_object();
  w.key("call");
  w.value_string(f.caught.call);
  w.key("how");
  w.value_string(f.caught.how);
  w.end_object();
}

void write_history(JsonWriter& w, const HeadroomTrend& trend) {
  w.key("history");
  w.begin_object();
  w.key("dtype");
  w.value_string(trend.dtype);
  w.key("steps");
  w.begin_array();
  for (const HeadroomPoint& p : trend.history) {
    w.begin_object();
    w.key("step");
    w.value_int(p.step);
    w.key("max");
    w.value_float(p.magnitude);
    w.key("fraction");
    w.value_float(p.fraction);
    w.end_object();
  }
  w.end_array();
  w.key("trend");
  w.value_string(trend.text);
  w.end_object();
}

}  // namespace

void write_detail_fields(JsonWriter& w, const Finding& f) {
  w.key("api_name");
  w.value_string(f.call);
  w.key("rank");
  w.value_string(to_string(f.severity));
  w.key("scene_type");
  w.value_string(scene_name(f.scene));
  write_indices(w, "input_args_anomaly_indices", f.input_indices);
  w.key("input_kwargs_anomaly_keys");
  w.begin_array();
  for (const std::string& k : f.kwarg_keys) w.value_string(k);
  w.end_array();
  write_indices(w, "output_anomaly_indices", f.output_indices);
  if (f.scene == Scene::NumericalMutation) {
    w.key("threshold");
    w.value_float(f.threshold);
    w.key("scale_change_detected");
    w.value_bool(true);
  }
}

std::string ArgFacts::text() const {
  if (!is_tensor()) {
    return position + ": " + type + (value ? " " + format_float(*value) : std::string());
  }
  std::string s = position + ": " + dtype + " " + shape_text(shape);
  if (counted) {
    s += ": " + std::to_string(nan) + " NaN, " + std::to_string(posinf) + " +inf, " +
         std::to_string(neginf) + " -inf";
  }
  return s;
}

void ArgFacts::write(JsonWriter& w) const {
  w.begin_object();
  w.key("position");
  w.value_string(position);
  w.key("type");
  w.value_string(type);
  if (is_tensor()) {
    w.key("dtype");
    w.value_string(dtype);
    w.key("shape");
    w.begin_array();
    for (int64_t d : shape) w.value_int(d);
    w.end_array();
    if (counted) {
      w.key("nan");
      w.value_int(nan);
      w.key("posinf");
      w.value_int(posinf);
      w.key("neginf");
      w.value_int(neginf);
    }
  } else if (value) {
    w.key("value");
    w.value_float(*value);
  }
  w.end_object();
}

std::string OverflowFacts::message() const {
  const Finding& f = finding;
  std::string m = "msprobe_cpp: overflow at step " + std::to_string(step) + ", rank " +
                  std::to_string(rank) + ": " + f.call + " (" + to_string(f.severity) + ", " +
                  scene_name(f.scene) + ")";
  if (origin) m += "\n  origin: " + origin_words(*this);
  if (!caught.call.empty()) {
    m += "\n  caught: at " + caught.call + ", where the NaN/inf " + caught.how +
         " (held until then: it was in tensors that need no gradient, which the program may "
         "still clean)";
  }
  if (!note.empty()) m += "\n  note:   " + note;
  if (raised_calls_later > 0) {
    m += "\n  raised " + std::to_string(raised_calls_later) + " call" +
         (raised_calls_later == 1 ? "" : "s") +
         " later: statistics come back from the device in batches (overflow_check.sync \"call\" "
         "stops at the call itself)";
  }
  m += "\n  module: " + module.value_or("(none recorded)");
  m += "\n  source: " + source.value_or("(no Python frame)");
  // torch.compile's graph code (a backend that runs the graph eagerly: its calls are recorded).
  if (source && source->rfind("<eval_with_key>", 0) == 0) {
    m += "\n  compiled: the call ran inside a compiled region (torch.compile's graph code); run "
         "the model uncompiled (its _orig_mod) to see the call where it is written";
  }
  for (const ArgFacts& t : tensors) m += "\n  " + t.text();
  if (history) m += "\n  history: " + history_text(*history);
  for (const ReplayFacts& r : replay.verdicts) m += "\n  " + r.verdict;
  if (!replay.not_replayed.empty()) m += "\n  " + replay.not_replayed;
  if (const std::vector<std::string>& bad = gradients.parameters; !bad.empty()) {
    m += "\n  non-finite gradients:";
    for (size_t i = 0; i < bad.size() && i < 8; ++i) m += (i ? ", " : " ") + bad[i];
    if (bad.size() > 8) m += " (and " + std::to_string(bad.size() - 8) + " more)";
  }
  // A replay that was finite wider says the values outgrew the dtype: a real overflow, which no
  // ignore rule should hide. Only where that is not known is an intended NaN/inf (log(0)) likely.
  const bool outgrew_dtype =
      std::any_of(replay.verdicts.begin(), replay.verdicts.end(),
                  [](const ReplayFacts& r) { return r.kind == "wider" && r.finite; });
  // A rule silences anomalous outputs: NaN/inf written into running statistics is in none.
  if (finding.scene == Scene::InputNormalOutputAnomaly && origin == Origin::Op && !started_model &&
      !outgrew_dtype && !finding.output_indices.empty()) {
    m += "\n  intended? an ignore rule in a file named by overflow_check.rules silences it:\n" +
         ignore_rule_snippet();
  }
  m += "\n  dump:   " + dump_words(*this);
  return m;
}

std::string OverflowFacts::absorbed_line() const {
  bool kinds[3] = {false, false, false};
  for (const ArgFacts& t : tensors) {
    if (t.is_tensor()) {
      kinds[0] = kinds[0] || t.nan > 0;
      kinds[1] = kinds[1] || t.posinf > 0;
      kinds[2] = kinds[2] || t.neginf > 0;
    }
  }
  std::string what;
  const char* names[3] = {"NaN", "+inf", "-inf"};
  for (int k = 0; k < 3; ++k) {
    if (kinds[k]) what += (what.empty() ? "" : "/") + std::string(names[k]);
  }
  if (what.empty()) what = "NaN/inf";
  const std::string where = source ? " (" + *source + ")" : "";
  if (held) {
    const std::string made = origin == Origin::Op
                                 ? " made by " + finding.call + where
                                 : " that came in with an input of " + finding.call + where;
    // The note says how the step ended it (OverflowDecisions::finish_held).
    return "msprobe_cpp: step " + std::to_string(step) + ": " + what + made +
           " stayed in tensors that need no gradient and did no damage by the end of the step: " +
           note + "; no stop (said once per call site)";
  }
  const std::string whence =
      origin == Origin::Parameter ? "parameter " + parameter.value_or("?") : "an input";
  return "msprobe_cpp: step " + std::to_string(step) + ": " + what + " in " + whence +
         " was absorbed by " + finding.call + where + "; no stop (said once per call site)";
}

void fit_replay_advice(OverflowFacts& facts) {
  if (!facts.history || !facts.history->jumped) return;
  for (ReplayFacts& r : facts.replay.verdicts) {
    const size_t advice = r.verdict.find("; keep this op in");
    if (r.kind != "wider" || !r.finite || advice == std::string::npos) continue;
    r.verdict.erase(advice);
    r.verdict +=
        "; but its values jumped since the last step (history): look at what changed before "
        "this step (the learning rate, the update before it, its data) before widening this op";
  }
}

std::string OverflowFacts::ignore_rule_snippet() const {
  std::string s = "    ignore_nan_inf:\n      - api_name: \"" + torch_api_name(finding.call) +
                  "\"\n        output_ignore:\n";
  for (size_t i : finding.output_indices) s += "          - index: " + std::to_string(i) + "\n";
  // msprobe's rule format names a call by its first two parts only: say what else it silences.
  const size_t dot = finding.call.find('.');
  const size_t second = finding.call.find('.', dot + 1);
  const std::string head = finding.call.substr(0, second);
  std::string outputs;
  for (size_t i : finding.output_indices) {
    outputs += (outputs.empty() ? "output[" : ", output[") + std::to_string(i) + "]";
  }
  if (is_module_name(finding.call)) {
    s += "    (it silences every module call named " + head + ".* -- " +
         finding.call.substr(dot + 1, second - dot - 1) + " and every module inside it -- whose " +
         outputs + " holds NaN/inf: msprobe's rules name a call by its first two parts)";
  } else {
    s += "    (it silences every " + head + " call in the model whose " + outputs +
         " holds NaN/inf, not only this one: msprobe's rules name an API, not a call site)";
  }
  return s;
}

void OverflowFacts::write(JsonWriter& w) const {
  w.begin_object();
  write_detail_fields(w, finding);
  w.key("origin");
  if (origin) {
    w.value_string(to_string(*origin));
  } else {
    w.value_null();
  }
  write_optional_string(w, "parameter", parameter);
  write_optional_string(w, "optimizer_state", optimizer_state);
  write_optional_string(w, "module", module);
  write_optional_string(w, "source", source);
  w.key("tensors");
  w.begin_array();
  for (const ArgFacts& t : tensors) t.write(w);
  w.end_array();
  w.key("gradients");
  w.begin_array();
  for (const std::string& g : gradients.parameters) w.value_string(g);
  w.end_array();
  w.key("masked");
  w.value_bool(gradients.masked);
  w.key("absorbed");
  w.value_bool(absorbed);
  if (held) write_caught(w, *this);
  w.key("note");
  w.value_string(note);
  if (raised_calls_later > 0) {  // batched sync only
    w.key("raised_calls_later");
    w.value_int(raised_calls_later);
  }
  if (history) write_history(w, *history);
  if (replay.tried) {
    w.key("replay");
    w.begin_array();
    for (const ReplayFacts& r : replay.verdicts) r.write(w);
    w.end_array();
    w.key("not_replayed");
    if (replay.not_replayed.empty()) {
      w.value_null();
    } else {
      w.value_string(replay.not_replayed);
    }
  }
  w.key("step");
  w.value_int(step);
  w.end_object();
}

void ReplayFacts::write(JsonWriter& w) const {
  auto number = [&w](const char* key, const std::optional<double>& v) {
    w.key(key);
    if (v) {
      w.value_float(*v);
    } else {
      w.value_null();
    }
  };
  w.begin_object();
  w.key("kind");
  w.value_string(kind);
  w.key("dtype");
  w.value_string(dtype);
  w.key("device");
  w.value_string(device);
  w.key("finite");
  w.value_bool(finite);
  number("max", max);
  number("min", min);
  w.key("verdict");
  w.value_string(verdict);
  w.end_object();
}

namespace {

ArgFacts tensor_arg_facts(const std::string& position, const Entry& e) {
  ArgFacts a;
  a.position = position;
  a.type = "torch.Tensor";
  a.dtype = e.dtype;
  a.shape = e.shape.to_vector();
  if (e.nonfinite.known()) {
    a.counted = true;
    a.nan = e.nonfinite.nan;
    a.posinf = e.nonfinite.posinf;
    a.neginf = e.nonfinite.neginf;
  }
  return a;
}

void collect_arg_facts(const std::string& position, const Entry& e, bool compat,
                       std::vector<ArgFacts>& out) {
  if (e.is_tensor()) {
    out.push_back(tensor_arg_facts(position, e));
    return;
  }
  if (e.kind == Entry::Kind::Object) {
    ArgFacts a;
    a.position = position;
    a.type = e.type.empty() ? "null" : e.type;
    if (e.value.kind == Scalar::Kind::Float) a.value = e.value.number;
    out.push_back(std::move(a));
    return;
  }
  // A list: its tensor leaves, numbered in depth-first order, the anomalous ones told.
  size_t k = 0;
  auto walk = [&](const Entry& x, auto&& self) -> void {
    if (x.is_tensor()) {
      if (is_anomalous(x, compat)) {
        out.push_back(tensor_arg_facts(position + "[" + std::to_string(k) + "]", x));
      }
      ++k;
    } else if (x.has_items()) {
      for (const Entry& item : x.items) self(item, self);
    }
  };
  walk(e, walk);
}

}  // namespace

std::vector<ArgFacts> anomalous_args(const CallRecord& rec, const Finding& finding, bool compat) {
  std::vector<ArgFacts> out;
  for_each_arg(rec, [&](const ArgPos& pos, const Entry& e) {
    if (finding.lists(pos)) collect_arg_facts(pos.label(), e, compat, out);
  });
  return out;
}

}  // namespace msprobe
