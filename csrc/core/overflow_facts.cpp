#include "core/overflow_facts.h"

#include <cstdio>

#include <algorithm>
#include <stdexcept>

#include "core/anomaly.h"
#include "core/fact_fields.h"

namespace msprobe {

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

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

OverflowFacts peer_stop_facts(const PeerOverflow& peer, int64_t step, int rank,
                              const std::string& dump_dir, std::vector<std::string> gradients) {
  OverflowFacts f;
  f.peer.stop = peer;
  f.finding.call = peer.call;
  for (Scene s : {Scene::InputNormalOutputAnomaly, Scene::InputAnomalyOutputAnomaly,
                  Scene::InputAnomalyOutputNormal, Scene::NumericalMutation}) {
    if (peer.scene == scene_name(s)) f.finding.scene = s;
  }
  for (Severity s : {Severity::Medium, Severity::High, Severity::Critical}) {
    if (peer.level == to_string(s)) f.finding.severity = s;
  }
  f.origin = Origin::Peer;
  f.peer.rank = peer.rank;
  f.step = step;
  f.rank = rank;
  f.dump.dir = dump_dir;
  f.gradients.parameters = std::move(gradients);
  return f;
}

std::string peer_stop_line(const PeerOverflow& peer, int rank) {
  return "[rank " + std::to_string(rank) + "] stopping: rank " + std::to_string(peer.rank) +
         " overflowed at step " + std::to_string(peer.step) + " (" + peer.call + ", origin " +
         (peer.origin.empty() ? "None" : peer.origin) + ")";
}

std::string OverflowFacts::message() const {
  const Finding& f = finding;
  if (peer.stop) return peer_stop_line(*peer.stop, rank) + field_lines(fields_of(*this));
  return "msprobe_cpp: overflow at step " + std::to_string(step) + ", rank " +
         std::to_string(rank) + ": " + f.call + " (" + to_string(f.severity) + ", " +
         scene_name(f.scene) + ")" + field_lines(fields_of(*this));
}

std::string OverflowFacts::origin_words() const {
  const std::string name = to_string(*origin);
  switch (*origin) {
    case Origin::Op:
      return name + " (this call made NaN/inf from finite inputs)";
    case Origin::Input:
      return name +
             " (NaN/inf came in with a tensor argument that no call of this step made: the batch?)";
    case Origin::Parameter:
      return name + (optimizer_state
                         ? " (NaN/inf came in with the optimizer's state: " + *optimizer_state +
                               " of parameter " + parameter.value_or("?") + ")"
                         : " (NaN/inf came in with parameter " + parameter.value_or("?") + ")");
    case Origin::Peer:
      return name + " (NaN/inf came from another rank through this collective)";
  }
  return name;
}

std::string OverflowFacts::history_text() const {
  std::string text;
  for (size_t i = 0; i < history->history.size(); ++i) {
    const HeadroomPoint& p = history->history[i];
    char buf[64];
    std::snprintf(buf, sizeof buf, "%sstep %lld %.0f%%", i ? ", " : "",
                  static_cast<long long>(p.step), p.fraction * 100.0);
    text += buf;
  }
  return text + " of " + history->dtype.substr(history->dtype.rfind('.') + 1) +
         "'s range: " + history->text;
}

std::string OverflowFacts::dump_words() const {
  if (!dump.error.empty()) return "not written: " + dump.error;
  if (dump.dir.empty()) return "none (overflow_nums reached: no more dumps are written)";
  return dump.dir + "  (overflow_report.json, dump.json" +
         (dump.tensor_files ? std::string(", ") + kTensorFolder + "/)" : std::string(")"));
}

std::string OverflowFacts::source_line() const {
  std::string line = "source: " + source.value_or("(no Python frame)");
  // torch.compile's graph code (a backend that runs the graph eagerly: its calls are recorded).
  if (source && source->rfind("<eval_with_key>", 0) == 0) {
    line +=
        "\n  compiled: the call ran inside a compiled region (torch.compile's graph code); run "
        "the model uncompiled (its _orig_mod) to see the call where it is written";
  }
  return line;
}

std::string OverflowFacts::raised_calls_later_line() const {
  if (raised_calls_later <= 0) return "";
  return "raised " + std::to_string(raised_calls_later) + " call" +
         (raised_calls_later == 1 ? "" : "s") +
         " later: statistics come back from the device in batches (overflow_check.sync \"call\" "
         "stops at the call itself)";
}

std::string OverflowFacts::gradients_line() const {
  const std::vector<std::string>& bad = gradients.parameters;
  if (bad.empty()) return "";
  std::string line = "non-finite gradients:";
  for (size_t i = 0; i < bad.size() && i < 8; ++i) line += (i ? ", " : " ") + bad[i];
  if (bad.size() > 8) line += " (and " + std::to_string(bad.size() - 8) + " more)";
  return line;
}

std::string OverflowFacts::intended_line() const {
  // A replay that was finite wider says the values outgrew the dtype: a real overflow, which no
  // ignore rule should hide. Only where that is not known is an intended NaN/inf (log(0)) likely.
  const bool outgrew_dtype =
      std::any_of(replay.verdicts.begin(), replay.verdicts.end(),
                  [](const ReplayFacts& r) { return r.kind == "wider" && r.finite; });
  // A rule silences anomalous outputs: NaN/inf written into running statistics is in none.
  if (finding.scene != Scene::InputNormalOutputAnomaly || origin != Origin::Op || started_model ||
      outgrew_dtype || finding.output_indices.empty()) {
    return "";
  }
  return "intended? an ignore rule in a file named by overflow_check.rules silences it:\n" +
         ignore_rule_snippet();
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
  write_json_fields(w, fields_of(*this));
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

namespace {

template <typename T>
std::vector<std::vector<FactField>> records_of(const std::vector<T>& facts) {
  std::vector<std::vector<FactField>> out;
  for (const T& f : facts) out.push_back(fields_of(f));
  return out;
}

std::string joined_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += (out.empty() ? "" : "\n  ") + l;
  return out;
}

}  // namespace

std::vector<FactField> fields_of(const Finding& f) {
  std::vector<FactField> out = {
      {"api_name", "call", FactValue::of(f.call)},
      {"rank", "level", FactValue::of(to_string(f.severity))},
      {"scene_type", "scene", FactValue::of(scene_name(f.scene))},
      {"input_args_anomaly_indices", "input_args_anomaly_indices",
       FactValue::list(f.input_indices)},
      {"input_kwargs_anomaly_keys", "input_kwargs_anomaly_keys", FactValue::list(f.kwarg_keys)},
      {"output_anomaly_indices", "output_anomaly_indices", FactValue::list(f.output_indices)},
  };
  if (f.scene == Scene::NumericalMutation) {
    out.push_back({"threshold", nullptr, FactValue::of(f.threshold)});
    out.push_back({"scale_change_detected", nullptr, FactValue::of(true)});
  }
  return out;
}

std::vector<FactField> fields_of(const ArgFacts& a) {
  std::vector<FactField> out = {
      {"position", "position", FactValue::of(a.position)},
      {"type", "type", FactValue::of(a.type)},
  };
  if (a.is_tensor()) {
    out.push_back({"dtype", "dtype", FactValue::of(a.dtype)});
    out.push_back({"shape", "shape", FactValue::list(a.shape)});
    if (a.counted) {
      out.push_back({"nan", "nan", FactValue::of(a.nan)});
      out.push_back({"posinf", "posinf", FactValue::of(a.posinf)});
      out.push_back({"neginf", "neginf", FactValue::of(a.neginf)});
    }
  } else if (a.value) {
    out.push_back({"value", "value", FactValue::of(*a.value)});
  }
  out.push_back({nullptr, "text", FactValue::of(a.text()), a.text()});
  return out;
}

const std::vector<MemberField<ReplayFacts>>& replay_members() {
  static const std::vector<MemberField<ReplayFacts>> table = {
      {"kind", "kind", &ReplayFacts::kind},
      {"dtype", "dtype", &ReplayFacts::dtype},
      {"device", "device", &ReplayFacts::device},
      {"finite", "finite", &ReplayFacts::finite},
      {"max", "max", &ReplayFacts::max},
      {"min", "min", &ReplayFacts::min},
      {"verdict", "verdict", &ReplayFacts::verdict, false, /*is_line=*/true},
  };
  return table;
}

const std::vector<MemberField<PeerOverflow>>& peer_overflow_members() {
  static const std::vector<MemberField<PeerOverflow>> table = {
      {"rank", "rank", &PeerOverflow::rank},
      {"step", "step", &PeerOverflow::step},
      {"call", "call", &PeerOverflow::call},
      {"origin", "origin", &PeerOverflow::origin, /*null_if_empty=*/true},
      {"scene", "scene", &PeerOverflow::scene, /*null_if_empty=*/true},
      {"level", "level", &PeerOverflow::level, /*null_if_empty=*/true},
  };
  return table;
}

const std::vector<MemberField<HeadroomPoint>>& headroom_point_members() {
  static const std::vector<MemberField<HeadroomPoint>> table = {
      {"step", nullptr, &HeadroomPoint::step},
      {"max", nullptr, &HeadroomPoint::magnitude},
      {"fraction", nullptr, &HeadroomPoint::fraction},
  };
  return table;
}

std::vector<FactField> fields_of(const ReplayFacts& r) {
  return fields_from(replay_members(), r);
}

namespace {

std::vector<FactField> fields_of(const HeadroomTrend& trend) {
  std::vector<std::vector<FactField>> steps;
  for (const HeadroomPoint& p : trend.history)
    steps.push_back(fields_from(headroom_point_members(), p));
  return {{"dtype", nullptr, FactValue::of(trend.dtype)},
          {"steps", nullptr, FactValue::list_of_records(std::move(steps))},
          {"trend", nullptr, FactValue::of(trend.text)}};
}

// The fields that say where the NaN/inf came from and where it did damage.
void add_origin_fields(const OverflowFacts& f, std::vector<FactField>& out) {
  // A peer stop's first line names the peer's call and origin; this rank has no call of its own.
  out.push_back({"origin", "origin",
                 f.origin ? FactValue::of(std::string(to_string(*f.origin))) : FactValue(),
                 f.origin && !f.peer.stop ? "origin: " + f.origin_words() : ""});
  out.push_back({"parameter", "parameter", FactValue::of(f.parameter)});
  out.push_back({"optimizer_state", "optimizer_state", FactValue::of(f.optimizer_state)});
  out.push_back({nullptr, "peer_rank", f.peer.rank ? FactValue::of(*f.peer.rank) : FactValue()});
  const bool caught = !f.caught.call.empty();
  out.push_back({"held", nullptr, FactValue::of(true), "", f.held});
  out.push_back({"caught", nullptr,
                 caught ? FactValue::of(std::vector<FactField>{
                              {"call", nullptr, FactValue::of(f.caught.call)},
                              {"how", nullptr, FactValue::of(f.caught.how)}})
                        : FactValue(),
                 "", f.held});
  out.push_back({nullptr, "caught", caught ? FactValue::of(f.caught.call) : FactValue(),
                 caught ? "caught: at " + f.caught.call + ", where the NaN/inf " + f.caught.how +
                              " (held until then: it was in tensors that need no gradient, which "
                              "the program may still clean)"
                        : ""});
  out.push_back({nullptr, "caught_how", FactValue::of(f.caught.how)});
}

// The evidence: the arguments, the site's history, the replays, the gradients.
void add_evidence_fields(const OverflowFacts& f, std::vector<FactField>& out) {
  std::vector<std::string> texts, verdicts;
  for (const ArgFacts& t : f.tensors) texts.push_back(t.text());
  for (const ReplayFacts& r : f.replay.verdicts) verdicts.push_back(r.verdict);
  out.push_back({"tensors", "tensors", FactValue::list_of_records(records_of(f.tensors)),
                 joined_lines(texts)});
  out.push_back({"history", nullptr, f.history ? FactValue::of(fields_of(*f.history)) : FactValue(),
                 f.history ? "history: " + f.history_text() : "", f.history.has_value()});
  out.push_back({"replay", "replay", FactValue::list_of_records(records_of(f.replay.verdicts)),
                 joined_lines(verdicts), f.replay.tried});
  out.push_back({"not_replayed", "not_replayed",
                 f.replay.not_replayed.empty() ? FactValue() : FactValue::of(f.replay.not_replayed),
                 f.replay.not_replayed, f.replay.tried});
  out.push_back(
      {"gradients", "gradients", FactValue::list(f.gradients.parameters), f.gradients_line()});
  out.push_back({"masked", "masked", FactValue::of(f.gradients.masked)});
  out.push_back({"absorbed", "absorbed", FactValue::of(f.absorbed)});
}

}  // namespace

std::vector<FactField> fields_of(const OverflowFacts& f) {
  std::vector<FactField> out = fields_of(f.finding);
  // A peer stop names the peer's call, scene and level where it published them.
  if (f.peer.stop) {
    for (FactField& field : out) {
      const std::string attr = field.attr ? field.attr : "";
      if ((attr == "scene" && f.peer.stop->scene.empty()) ||
          (attr == "level" && f.peer.stop->level.empty()))
        field.value = FactValue();
    }
  }
  out.push_back({"step", "step", FactValue::of(f.step)});
  out.push_back({nullptr, "rank", FactValue::of(f.rank)});
  add_origin_fields(f, out);
  out.push_back({"note", "note", FactValue::of(f.note), f.note.empty() ? "" : "note:   " + f.note});
  out.push_back({"raised_calls_later", nullptr, FactValue::of(f.raised_calls_later),
                 f.raised_calls_later_line(), f.raised_calls_later > 0});
  out.push_back({"module", "module", FactValue::of(f.module),
                 f.peer.stop ? "" : "module: " + f.module.value_or("(none recorded)")});
  out.push_back({"source", "source", FactValue::of(f.source), f.peer.stop ? "" : f.source_line()});
  add_evidence_fields(f, out);
  out.push_back({nullptr, nullptr, FactValue(), f.intended_line()});
  out.push_back({nullptr, "dump_dir", f.dump.dir.empty() ? FactValue() : FactValue::of(f.dump.dir),
                 f.peer.stop && f.dump.dir.empty() ? "" : "dump:   " + f.dump_words()});
  // Every stop has these, so that every documented field of OverflowError reads the same way on
  // every stop.
  out.push_back({nullptr, "peer_stop", FactValue::of(f.peer.stop.has_value())});
  out.push_back(
      {nullptr, "peer_step", f.peer.stop ? FactValue::of(f.peer.stop->step) : FactValue()});
  return out;
}

const char* report_key(const std::string& attr) {
  // Every optional field set, so that each is listed (as _C.overflow_field_names does).
  static const std::vector<FactField> every = [] {
    OverflowFacts f;
    f.held = true;
    f.raised_calls_later = 1;
    f.history = HeadroomTrend{"torch.float16", {}, ""};
    f.replay.tried = true;
    return fields_of(f);
  }();
  for (const FactField& field : every) {
    if (field.attr && field.json && attr == field.attr) return field.json;
  }
  throw std::logic_error("no field of a stop has the attribute \"" + attr + "\"");
}

}  // namespace msprobe
