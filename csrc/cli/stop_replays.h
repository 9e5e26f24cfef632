// What the live guard's replays said at the stop that wrote a dump (issue 23): read from the
// overflow_report.json beside its dump.json, for `check --format text`.
#pragma once

#include <string>
#include <vector>

namespace msprobe {

// The report's first_anomaly replay verdicts and its not_replayed reason, one line each; none when
// there is no report, it holds no replay, or it cannot be read (the check goes on without them).
std::vector<std::string> stop_replay_lines(const std::string& dump_file);

}  // namespace msprobe
