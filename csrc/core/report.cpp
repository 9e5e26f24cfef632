#include "core/report.h"

#include "core/fact_fields.h"

namespace msprobe {

namespace {

// Bytes of JSON that build up before a sink is handed them.
constexpr size_t kChunkBytes = 1 << 16;

void write_peer_stop(JsonWriter& w, const PeerOverflow& peer) {
  w.begin_object();
  write_json_fields(w, fields_from(peer_overflow_members(), peer));
  w.end_object();
}

}  // namespace

void write_finding_detail(JsonWriter& w, const Finding& f) {
  w.begin_object();
  write_json_fields(w, fields_of(f));
  w.end_object();
}

void Report::write(JsonWriter& w, const std::function<void(const std::string&)>& sink) const {
  auto grew = [&] {
    if (sink && w.str().size() >= kChunkBytes) sink(w.take_chunk());
  };
  w.begin_object();
  for (const auto& [key, severity] : kReportLists) {
    w.key(key);
    w.begin_array();
    if (findings.counts().by_level[static_cast<int>(severity)] > 0) {
      findings.for_each([&, level = severity](const Finding& f) {
        if (f.severity != level) return;
        w.value_string(f.call);
        grew();
      });
    }
    w.end_array();
  }
  w.key("anomaly_details");
  w.begin_array();
  findings.for_each([&](const Finding& f) {
    write_finding_detail(w, f);
    grew();
  });
  w.end_array();
  if (first_anomaly) {
    w.key("first_anomaly");
    first_anomaly->write(w);
  }
  if (peer_stop) {
    w.key("peer_stop");
    write_peer_stop(w, *peer_stop);
  }
  if (live_stop) {
    w.key("live_stop");
    w.value_raw(*live_stop);
  }
  if (monitor_alert) {
    w.key("monitor_alert");
    w.value_string(*monitor_alert);
  }
  w.end_object();
  if (sink) sink(w.take_chunk());
}

std::string Report::to_json(int indent) const {
  JsonWriter w(indent);
  write(w);
  return w.take();
}

std::string severity_summary(const SeverityCounts& counts) {
  const size_t n = counts.total();
  const auto& c = counts.by_level;
  return std::to_string(n) + " anomalous call" + (n == 1 ? "" : "s") + " (" + std::to_string(c[2]) +
         " critical, " + std::to_string(c[1]) + " high, " + std::to_string(c[0]) + " medium)";
}

namespace {

// "a, b, c (and 4 more)": the calls of `findings` whose judgement is `which`.
std::string join_calls(const Findings& findings, const std::vector<Judgement>& j, Judgement which,
                       std::optional<Severity> level = std::nullopt) {
  std::string s;
  size_t n = 0;
  size_t i = 0;
  findings.for_each([&](const Finding& f) {
    const size_t at = i++;
    if (at >= j.size() || j[at] != which || (level && f.severity != *level)) return;
    if (n < 3) s += (n ? ", " : "") + f.call;
    ++n;
  });
  if (n > 3) s += " (and " + std::to_string(n - 3) + " more)";
  return s;
}

}  // namespace

std::string step_summary(const Report& report, const std::vector<Judgement>& judgements,
                         int64_t step, int rank, const std::string& dump) {
  const Findings& findings = report.findings;
  const std::string who = rank_label(rank);
  std::string text =
      who + "msprobe_cpp: step " + std::to_string(step) +
      (report.peer_stop ? " written for a peer stop (rank " +
                              std::to_string(report.peer_stop->rank) + " overflowed): "
                        : " flagged: ") +
      // An anomaly no call record holds (what an optimizer step wrote, looked at after it) is
      // named below; "0 anomalous calls" alone would read as a clean step.
      (findings.empty() && report.first_anomaly && !report.peer_stop
           ? std::string("no anomalous call record; the first anomaly is outside the calls")
           : severity_summary(findings.counts())) +
      (rank >= 0 ? " on this rank\n" : "\n");
  if (report.monitor_alert) {
    text += who + "  flagged by the training monitor: " + *report.monitor_alert + "\n";
  }
  if (const auto& first = report.first_anomaly) {
    text += who + "  first anomaly: " + first->finding.call + " (" +
            to_string(first->finding.severity) + ", " + scene_name(first->finding.scene);
    if (first->origin) text += std::string(", origin ") + to_string(*first->origin);
    if (first->absorbed) {
      text += ", absorbed: no stop";
    } else if (first->held && first->caught.call.empty()) {
      text += ", did no damage: no stop";
    }
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
    text += who + "  absorbed (NaN/inf turned finite or let go before it did damage, no stop): " +
            absorbed + "\n";
  }
  const std::string kept = join_calls(findings, judgements, Judgement::HeldToEnd);
  if (!kept.empty()) {
    text += who +
            "  held to the end of the step (in tensors that need no gradient, no damage, no "
            "stop): " +
            kept + "\n";
  }
  const std::string expected = join_calls(findings, judgements, Judgement::Explained);
  if (!expected.empty()) {
    text += who + "  expected (from -inf masks and other deliberate constants): " + expected + "\n";
  }
  return text + who + "  dump: " + dump + "\n";
}

}  // namespace msprobe
