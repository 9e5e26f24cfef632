// What the live guard said at the stop that wrote a dump (issues 23 and 44): read from the
// overflow_report.json beside its dump.json, so that `check --format text` reports the stop's
// verdict first and its own offline reading beside it, and its JSON report holds it as
// `live_stop`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/config.h"

namespace msprobe {

struct LiveStop {
  std::string call;    // first_anomaly.api_name
  std::string origin;  // "op", "input", "parameter", "peer", or "" (none)
  std::string parameter;
  std::string note;
  bool absorbed = false;
  bool held_without_damage = false;  // held in tensors that need no gradient, and never caught
  std::optional<Severity> level;     // first_anomaly.rank
  std::string not_replayed;
  std::vector<std::string> replay_lines;  // the replay verdicts and the not_replayed reason
  std::string json;                       // first_anomaly as the report holds it, on one line
};

// The report's first_anomaly; none when there is no report or it cannot be read (the check goes
// on without it).
std::optional<LiveStop> read_live_stop(const std::string& dump_file);

// Whether the stop counts toward check's exit status by itself: it stopped training (neither
// absorbed nor held without damage) at `fail_on` or above. A stop whose NaN/inf no recorded call
// holds (an optimizer step's own arithmetic, judged after the step) leaves a dump with no
// finding: the stop is then the only evidence.
bool live_stop_fails(const std::optional<LiveStop>& stop, Severity fail_on);

}  // namespace msprobe
