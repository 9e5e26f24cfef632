// The overflow report (docs/formats.md, docs/check.md): the check command's JSON and
// overflow_report.json.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/detector.h"
#include "core/json_writer.h"
#include "core/overflow_facts.h"

namespace msprobe {

// torch.distributed: another rank overflowed, and this one stopped with it (a peer stop).
struct PeerStop {
  int rank = 0;        // the rank that overflowed
  int64_t step = 0;    // its step
  std::string call;    // its first flagged call
  std::string origin;  // that call's origin ("op", "input", "parameter"), or empty
};

struct Report {
  std::vector<Finding> findings;  // in record order
  // overflow_report.json only: the finding that flagged the step, whatever its level, so the
  // call where NaN or inf entered is named even when it came in with the data, with its origin,
  // module, source line and counts.
  std::optional<OverflowFacts> first_anomaly;
  std::optional<PeerStop> peer_stop;  // overflow_report.json of a rank stopped by a peer

  bool empty() const { return findings.empty(); }
  void write(JsonWriter& w) const;
  std::string to_json(int indent = 1) const;
};

// The members of one anomaly_details entry (api_name, rank, scene_type, indices, ...), written
// into an object the caller opened.
void write_detail_fields(JsonWriter& w, const Finding& f);

}  // namespace msprobe
