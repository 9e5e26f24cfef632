// The training monitor's alerts at each written step (issue 55): each written row scanned by
// msprobe's rules (core/monitor_anomalies.h) with what this product knows of it: msprobe's call
// id (the order its tag came in the step, kept by the hooks' MonitorHookRows), the module's
// call and the line that called it, its dtype's range. Says the alerts and hands over the files
// to write (anomaly.json, anomaly_context.json); the monitor's write thread writes them.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/monitor_anomalies.h"
#include "core/monitor_config.h"
#include "core/monitor_row_table.h"
#include "live/monitor/hook_rows.h"

namespace msprobe {

class MonitorAlerting {
 public:
  MonitorAlerting(const MonitorConfig& config, std::string output_root, double headroom,
                  std::shared_ptr<MonitorHookRows> hook_rows);
  bool on() const { return anomalies_.on(); }
  // This rank (-1: not distributed). With `alert.dump`, the folder of its anomaly.json,
  // <root>/anomaly_detected/rank<R> (else ""): the caller makes it and resets the file.
  std::string begin(int rank);
  // anomaly.json's pp_stage and group_mates; each module's class by "<vpp>:<name>".
  void place(int pp_stage, std::vector<int> group_mates,
             std::map<std::string, std::string> module_classes);
  // A written table of family `prefix` ("actv", "grad_unreduced", ...) at `step`.
  void scan(const std::string& prefix, const MonitorRowTable& table, int64_t step);
  // cc_distribution's slots at `step`, msprobe's "<collective>/rank<R>/<slot>" tags (no call id).
  void scan_collectives(const std::vector<MonitorCallSlot>& slots, int64_t step);
  // The step is written: its alerts are said; returns the files to write, (path, text).
  std::vector<std::pair<std::string, std::string>> step_written();
  // alert.dump_step_on: the first alert of the step written last whose tag holds one of its
  // fragments (its line), once; else "".
  std::string take_dump_reason() { return std::exchange(dump_reason_, std::string()); }

 private:
  MonitorRowOrigin origin_of(const std::string& prefix, const std::string& tag) const;

  const std::vector<MonitorOp> ops_;
  const bool dump_;
  const std::string output_root_;
  const std::shared_ptr<MonitorHookRows> hook_rows_;
  MonitorAnomalies anomalies_;
  int rank_ = 0;
  std::string folder_;
  std::map<std::string, std::string> module_classes_;
  const std::vector<std::string> dump_step_on_;
  std::string dump_reason_;
};

}  // namespace msprobe
