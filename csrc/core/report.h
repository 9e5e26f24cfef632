// The overflow report (docs/formats.md, docs/check.md): the check command's JSON and
// overflow_report.json, rendered from one model (Findings) that the text report renders too.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/detector.h"
#include "core/findings.h"
#include "core/json_writer.h"
#include "core/overflow_facts.h"

namespace msprobe {

struct Report {
  Findings findings;
  // overflow_report.json only: the finding that flagged the step, whatever its level, so the
  // call where NaN or inf entered is named even when it came in with the data, with its origin,
  // module, source line and counts.
  std::optional<OverflowFacts> first_anomaly;
  std::optional<PeerOverflow> peer_stop;  // overflow_report.json of a rank stopped by a peer
  // check only: the first_anomaly of the overflow_report.json beside the dump, as JSON text, so
  // that the report carries the live stop's verdict beside its own offline reading.
  std::optional<std::string> live_stop;
  // overflow_report.json of a step the training monitor's alert flagged (alert.dump_step_on):
  // the alert's line.
  std::optional<std::string> monitor_alert;

  bool empty() const { return findings.empty(); }
  // Writes the report object where `w` stands. With a `sink`, `w`'s text is handed to it as it
  // grows (check's document of any size), the last of it included.
  void write(JsonWriter& w, const std::function<void(const std::string&)>& sink = {}) const;
  std::string to_json(int indent = 1) const;
};

// The report's lists of calls by level, in the order they are written.
inline constexpr std::pair<const char*, Severity> kReportLists[] = {
    {"critical_apis", Severity::Critical},
    {"high_priority_apis", Severity::High},
    {"medium_priority_apis", Severity::Medium}};

// One member of the report's anomaly_details.
void write_finding_detail(JsonWriter& w, const Finding& f);

// "5 anomalous calls (1 critical, 2 high, 2 medium)".
std::string severity_summary(const SeverityCounts& counts);

// The one-screen stderr summary of a flagged step, each line prefixed "[rank R] " when `rank` is
// not -1: the first anomaly with its origin, source and counts, the flagged calls by level, the
// leads, the absorbed and the expected calls (three names a line), and where the dump went.
// `judgements` is parallel to report.findings.
std::string step_summary(const Report& report, const std::vector<Judgement>& judgements,
                         int64_t step, int rank, const std::string& dump);

}  // namespace msprobe
