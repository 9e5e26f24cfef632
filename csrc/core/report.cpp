#include "core/report.h"

#include <array>

namespace msprobe {

namespace {

void write_calls(JsonWriter& w, const char* key, const std::vector<Finding>& findings,
                 Severity severity) {
  w.key(key);
  w.begin_array();
  for (const Finding& f : findings) {
    if (f.severity == severity) w.value_string(f.call);
  }
  w.end_array();
}

}  // namespace

namespace {

void write_detail(JsonWriter& w, const Finding& f) {
  w.begin_object();
  write_detail_fields(w, f);
  w.end_object();
}

}  // namespace

void Report::write(JsonWriter& w) const {
  w.begin_object();
  write_calls(w, "critical_apis", findings, Severity::Critical);
  write_calls(w, "high_priority_apis", findings, Severity::High);
  write_calls(w, "medium_priority_apis", findings, Severity::Medium);
  w.key("anomaly_details");
  w.begin_array();
  for (const Finding& f : findings) write_detail(w, f);
  w.end_array();
  if (first_anomaly) {
    w.key("first_anomaly");
    first_anomaly->write(w);
  }
  if (peer_stop) {
    w.key("peer_stop");
    w.begin_object();
    w.key("rank");
    w.value_int(peer_stop->rank);
    w.key("step");
    w.value_int(peer_stop->step);
    w.key("call");
    w.value_string(peer_stop->call);
    w.key("origin");
    if (peer_stop->origin.empty()) {
      w.value_null();
    } else {
      w.value_string(peer_stop->origin);
    }
    w.end_object();
  }
  w.end_object();
}

std::string Report::to_json(int indent) const {
  JsonWriter w(indent);
  write(w);
  return w.take();
}

bool SeverityCounts::fails(Severity fail_on) const {
  for (int s = static_cast<int>(fail_on); s < 3; ++s) {
    if (by_level[s] > 0) return true;
  }
  return false;
}

std::string severity_summary(const std::vector<Finding>& findings) {
  SeverityCounts counts;
  for (const Finding& f : findings) counts.add(f.severity);
  return severity_summary(counts);
}

std::string severity_summary(const SeverityCounts& counts) {
  const size_t n = counts.total();
  const auto& c = counts.by_level;
  return std::to_string(n) + " anomalous call" + (n == 1 ? "" : "s") + " (" + std::to_string(c[2]) +
         " critical, " + std::to_string(c[1]) + " high, " + std::to_string(c[0]) + " medium)";
}

namespace {

// "a, b, c (and 4 more)": the calls of `findings` whose judgement is `which`.
std::string join_calls(const std::vector<Finding>& findings, const std::vector<Judgement>& j,
                       Judgement which, std::optional<Severity> level = std::nullopt) {
  std::string s;
  size_t n = 0;
  for (size_t i = 0; i < findings.size() && i < j.size(); ++i) {
    if (j[i] != which || (level && findings[i].severity != *level)) continue;
    if (n < 3) s += (n ? ", " : "") + findings[i].call;
    ++n;
  }
  if (n > 3) s += " (and " + std::to_string(n - 3) + " more)";
  return s;
}

}  // namespace

std::string step_summary(const Report& report, const std::vector<Judgement>& judgements,
                         int64_t step, int rank, const std::string& dump) {
  const std::vector<Finding>& findings = report.findings;
  const std::string who = rank >= 0 ? "[rank " + std::to_string(rank) + "] " : "";
  std::string text =
      who + "msprobe_cpp: step " + std::to_string(step) +
      (report.peer_stop ? " written for a peer stop (rank " +
                              std::to_string(report.peer_stop->rank) + " overflowed): "
                        : " flagged: ") +
      severity_summary(findings) + (rank >= 0 ? " on this rank\n" : "\n");
  if (const auto& first = report.first_anomaly) {
    text += who + "  first anomaly: " + first->finding.call + " (" +
            to_string(first->finding.severity) + ", " + scene_name(first->finding.scene);
    if (first->origin) text += std::string(", origin ") + to_string(*first->origin);
    if (first->absorbed) text += ", absorbed: no stop";
    text += ")\n";
    if (!first->note.empty()) text += who + "    " + first->note + "\n";
    if (first->source) text += who + "    source: " + *first->source + "\n";
    for (const ArgFacts& t : first->tensors) text += who + "    " + t.text() + "\n";
  }
  for (Severity level : {Severity::Critical, Severity::High, Severity::Medium}) {
    const std::string calls = join_calls(findings, judgements, Judgement::Flagged, level);
    if (!calls.empty()) text += who + "  " + to_string(level) + ": " + calls + "\n";
  }
  const std::string leads = join_calls(findings, judgements, Judgement::Lead);
  if (!leads.empty()) {
    text += who +
            "  leads (finite values that jumped by more than the mutation threshold): " + leads +
            "\n";
  }
  const std::string absorbed = join_calls(findings, judgements, Judgement::Absorbed);
  if (!absorbed.empty()) {
    text += who + "  absorbed (NaN/inf turned finite before it did damage, no stop): " + absorbed +
            "\n";
  }
  const std::string expected = join_calls(findings, judgements, Judgement::Explained);
  if (!expected.empty()) {
    text += who + "  expected (from -inf masks and other deliberate constants): " + expected + "\n";
  }
  return text + who + "  dump: " + dump + "\n";
}

}  // namespace msprobe
