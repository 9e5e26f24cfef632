// The training monitor's config (issue 55): msprobe 26.2.0's TrainerMon JSON file
// (core/monitor/utils.py validate_config, pytorch/monitor/module_hook.py set_config;
// docs/monitor-reference.md §2), read into one value with msprobe's defaults. Every key is read
// from one table (kMonitorKeys in monitor_config.cpp), which also names the keys in messages.
// A bad value is refused with the project's one-line message, every bad key at once; a key that
// needs Megatron's internals is refused with the reason (docs/config.md, "The training monitor").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace msprobe {

// The statistics msprobe's `ops` name, each a CSV column, in the order given.
enum class MonitorOp { Norm, Min, Max, Zeros, Nans, Id, Mean, Shape, Dtype };
const char* monitor_op_name(MonitorOp op);

struct MonitorAlertRule {
  enum class Kind { Turbulence, Nan };  // AnomalyTurbulence, AnomalyNan
  Kind kind = Kind::Turbulence;
  std::optional<double> threshold;  // AnomalyNan's is optional; a Turbulence rule without one
                                    // is skipped, as msprobe skips it
};

// Which of msprobe's statistics families are recorded.
struct MonitorFamilies {
  bool all_xy = false;
  bool xy_distribution = false;
  bool forward_only = false;
  bool backward_only = false;
  bool wg_distribution = false;
  bool mv_distribution = false;
  bool ur_distribution = false;  // msprobe 26.2.0 cancels it in CSV (said once)
  bool param_distribution = false;
  bool mg_direction = false;
  bool monitor_mbs_grad = false;
};

// cc_distribution: statistics of torch.distributed's collectives' tensors.
struct MonitorCollectivesConfig {
  bool enable = false;
  bool pre_hook = false;  // cc_pre_hook: their inputs too, before the call
  bool log_only = false;  // cc_log_only: only which collectives are called from where
  // cc_codeline: only calls whose stack ("<file>[<line>]   <function>;...") one of these
  // regular expressions finds (ECMAScript's dialect of Python's re); empty: every call.
  std::vector<std::string> codeline;
};

// Which steps are written, and how many steps a file holds.
struct MonitorSchedule {
  int64_t start_step = 0;
  int64_t step_interval = 1;
  int64_t collect_times = 100000000;
  int64_t step_count_per_record = 1;
  bool dynamic_on = false;
};

// What the files hold and where they go.
struct MonitorOutput {
  std::vector<MonitorOp> ops = {MonitorOp::Norm, MonitorOp::Shape, MonitorOp::Dtype};
  double eps = 1e-8;
  int ndigits = 6;
  std::vector<int64_t> module_ranks;  // empty: every rank writes
  enum class Format { Csv, TensorBoard };
  Format format = Format::Csv;
  bool squash_name = false;
  bool print_struct = false;
  bool stack_info = false;
  // append_output: the first and last time tags of an earlier run's folders to go on writing
  // into (distributed runs); empty: a new folder.
  std::vector<std::string> append_output;
};

struct MonitorAlerts {
  std::vector<MonitorAlertRule> rules;
  bool dump = false;  // anomaly_detected/rank<R>/anomaly.json
  // dump_step_on (ours): an alert whose tag holds one of these flags the step of the live
  // PrecisionDebugger (task overflow_check), whose dump then writes it ("": every tag).
  std::vector<std::string> dump_step_on;
};

struct MonitorConfig {
  std::string source;  // the file, for messages
  // Module names (keys of `targets`), in the file's order; empty: every module and parameter.
  std::vector<std::string> targets;
  MonitorFamilies families;
  MonitorCollectivesConfig collectives;
  MonitorSchedule schedule;
  MonitorOutput output;
  MonitorAlerts alerts;
  // What msprobe would say when it reads this file and goes on (ur_distribution cancelled,
  // both forward_only and backward_only): said once by the monitor.
  std::vector<std::string> notes;
};

// Reads `doc` (the file's JSON object); `source` names it in messages. Throws ConfigError with
// one line per bad key.
MonitorConfig parse_monitor_config(const nlohmann::json& doc, const std::string& source);

// The keys read, in the order messages list them.
std::vector<std::string> monitor_key_names();

}  // namespace msprobe
