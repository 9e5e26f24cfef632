// `msprobe-cpp monitor-plot` (issue 55): the curves of a training monitor's run, drawn without
// TensorBoard. A run folder's CSVs (msprobe 26.2.0's TrainerMon files, core/monitor_csv.h) give,
// for each file kind (actv, grad_reduced, ...) and each row name, one statistic over the steps;
// the alerts of its rank's anomaly.json mark the steps where they fired.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace msprobe {

struct MonitorCurve {
  std::string kind;  // the files' prefix: "actv", "grad_reduced", ...
  std::string name;  // the row's name ("fc1.output", "fc1.weight"), ":<micro step>" after a
                     // micro step other than 0
  std::vector<int64_t> steps;
  std::vector<double> values;
  std::vector<int64_t> alerts;  // steps an alert fired at for this row
};

// The curves of `run_dir`'s CSVs for the column `op` ("norm"); a file without that column is
// left out. Throws std::runtime_error naming a file that cannot be read as a monitor CSV.
std::vector<MonitorCurve> read_monitor_curves(const std::string& run_dir, const std::string& op);

// Marks the alerts of `anomaly_json` (anomaly_detected/rank<R>/anomaly.json) on the curves they
// name; a missing file marks none.
void mark_monitor_alerts(std::vector<MonitorCurve>& curves, const std::string& anomaly_json);

// The run folders under `path`: itself when it holds monitor CSVs, else its sub-folders that
// do (MONITOR_OUTPUT_DIR holds one per run and rank), by name.
std::vector<std::string> monitor_run_folders(const std::string& path);

// The anomaly.json of a run folder's rank: <root>/anomaly_detected/rank<R>/anomaly.json, R from
// the folder's "-rank<R>-"; "" when the name has none.
std::string monitor_alerts_file(const std::string& run_dir);

// Writes <out_dir>/<kind>/<name>.svg for each curve; returns the files written.
std::vector<std::string> write_monitor_plots(const std::vector<MonitorCurve>& curves,
                                             const std::string& out_dir, const std::string& op);

}  // namespace msprobe
