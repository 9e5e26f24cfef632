// The check command's text report of one dump file (docs/check.md, "The text format"), the second
// renderer of a report's Findings: the header (which counts them), then each finding's line in
// record order with the source lines of stack.json, looked up a batch of findings at a time, so
// memory holds one batch however many there are.
#pragma once

#include <optional>
#include <ostream>
#include <string>

#include "cli/stop_replays.h"
#include "core/findings.h"

namespace msprobe {

// `live`: the stop beside the dump (read_live_stop), shown first where it stopped training, even
// when no record of the dump holds an anomaly.
void write_text_report(std::ostream& out, const std::string& dump_file, const Findings& findings,
                       const std::optional<LiveStop>& live);

}  // namespace msprobe
