// config.json reader and validator (docs/config.md). Every rejected value raises ConfigError with
// one line naming the file, the field path, the value and what is allowed.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config_error.h"
#include "core/free_benchmark_rules.h"
#include "core/msprobe26_keys.h"
#include "core/grad_summary.h"
#include "core/monitor_config.h"
#include "core/range_list.h"

namespace msprobe {

// Structure: msprobe 26.x's, the calls' names and places without their values.
// Monitor: msprobe's TrainerMon (its own config file, core/monitor_config.h); never a
// config.json's task.
enum class Task { Statistics, Tensor, OverflowCheck, GradProbe, FreeBenchmark, Structure, Monitor };
// Debug: msprobe 26.x's, where nothing is hooked and PrecisionDebugger.save() records.
enum class Level { L0, L1, Mix, Debug };
enum class SummaryMode { Statistics, Md5, Xor };  // Xor: msprobe 26.x's
enum class Action { Raise, Continue };
// When device statistics come back to the host and calls are judged: at each call (exact stop,
// a sync per call), in batches (a sync per batch; the stop comes at the first hooked call after
// the verdict), or auto: per call for CPU tensors, in batches once device tensors are involved.
enum class SyncMode { Auto, Call, Batch };
enum class Severity { Medium = 0, High = 1, Critical = 2 };
// Where an unexplained NaN/inf of a step came from (issue 8): an op that made it from clean
// inputs, or a tensor that brought it into the step (the batch, or a model's parameter).
enum class Origin { Op, Input, Parameter, Peer };

const char* to_string(Task t);
const char* to_string(Level l);
const char* to_string(Severity s);  // "medium" | "high" | "critical"
const char* to_string(Origin o);    // "op" | "input" | "parameter"

// data_mode as flags; ["all"] sets all four.
struct DataMode {
  bool forward = true, backward = true, input = true, output = true;
};

// The "statistics" and "tensor" sections.
struct CollectSection {
  std::vector<std::string> scope;  // empty, or exactly two call names
  std::vector<std::string> list;
  DataMode data_mode;
  // md5: "statistics" only; xor (26.x): "statistics" and "tensor"
  SummaryMode summary_mode = SummaryMode::Statistics;
  // msprobe 26.x's statistics.tensor_list: the calls (a part of their name) whose tensors are
  // also saved, as task tensor saves them.
  std::vector<std::string> tensor_list;
  Msprobe26Section msprobe26;  // slice and request_id
};

// A finite value that changes by more than this factor between a call's input and output is a
// mutation (msprobe's default; overflow_check.mutation_threshold, check --threshold).
inline constexpr double kDefaultMutationThreshold = 1e5;

// The "overflow_check" section, with this product's extensions (docs/config.md).
struct OverflowSection {
  int64_t overflow_nums = 1;  // -1 = unlimited
  Action action = Action::Raise;
  Severity stop_level = Severity::Critical;
  double mutation_threshold = kDefaultMutationThreshold;
  std::vector<std::string> rules;  // extra rule files, resolved against the config's folder
  bool compat = false;
  // Which origins stop the run (action raise); findings without an origin stop by stop_level.
  std::vector<Origin> stop_on = {Origin::Op, Origin::Input, Origin::Parameter, Origin::Peer};
  bool dump_skipped_steps = false;  // steps a loss scaler skipped are written too
  double min_loss_scale = 1.0;      // a loss scale below this stops the run
  SyncMode sync = SyncMode::Auto;
  int64_t sync_batch_calls = 256;  // calls judged per host sync under batched sync
  bool replay = true;              // an op-origin stop replays the call wider and on the CPU
  double headroom = 0.5;           // the share of a 16-bit dtype's range that warns (0: off)

  bool stops_on(Origin o) const;
};

struct Config {
  Task task = Task::Statistics;
  std::string dump_path;
  RangeList rank;
  RangeList step;
  Level level = Level::L1;
  CollectSection statistics;
  CollectSection tensor;
  OverflowSection overflow_check;
  GradProbeSection grad_probe;
  FreeBenchmarkSection free_benchmark;
  // msprobe's `async_dump`: a step's files are written by a thread of their own while the next
  // step runs (docs/config.md says when they are complete). Left out of a config: on for the
  // tasks that write every listed step, statistics and tensor, where formatting and writing a
  // step cost the training as much as recording it (issue 56); off for the rest, which write
  // only flagged steps (parse_config).
  bool async_dump = false;
  // APIs recorded besides the default wrap list ("Tensor.view"), every task.
  std::vector<std::string> extra_apis;
  // The msprobe generation the config speaks (detected, or its msprobe_generation key), and the
  // keys of 26.x.
  Generation generation = Generation::V1_1;
  Msprobe26Keys msprobe26;
  // Accepted but worth a word (a deprecated key): one line each, for the program to say.
  std::vector<std::string> warnings;
  // Task monitor: TrainerMon's config (load_monitor_config_file).
  MonitorConfig monitor;

  // The section that scope/list/data_mode come from for the chosen task.
  const CollectSection& collect() const { return task == Task::Tensor ? tensor : statistics; }
  // Task overflow_check: every call is judged by the overflow guard as it completes.
  bool watching() const { return task == Task::OverflowCheck; }
  // Tasks that hook calls and write dumps (statistics, tensor, overflow_check); grad_probe does
  // neither: start(), stop() and step() do nothing for it, as in msprobe.
  bool dumps_calls() const { return task != Task::GradProbe && task != Task::Monitor; }
  // free_benchmark checks each selected API call by running it again; it records none.
  bool records_calls() const { return dumps_calls() && task != Task::FreeBenchmark; }
};

// The line said at the first start() (issue 44): what the tool does to this run: the task, the
// level, `apis` torch APIs and `modules` modules hooked, and where the dumps go.
std::string on_line(const Config& c, size_t apis, size_t modules);

// Validates `doc` (the parsed config file, or an empty object when there is no file) with
// `overrides` (keyword arguments of PrecisionDebugger: task, dump_path, level, step, rank, and
// every key of the overflow_check section) applied on top. `source` names the file in messages
// ("config.json"); override errors name the keyword instead ("PrecisionDebugger(level=...)").
// Relative `rules` paths are resolved against `base_dir` when it is not empty.
Config parse_config(const nlohmann::json& doc, const std::string& source,
                    const nlohmann::json& overrides = nlohmann::json::object(),
                    const std::string& base_dir = "");

// Parses and validates the text of a config file; bad JSON is a ConfigError naming `source` with
// the line and column.
Config parse_config_text(const std::string& text, const std::string& source,
                         const nlohmann::json& overrides = nlohmann::json::object(),
                         const std::string& base_dir = "");

// Reads and validates a config file; a missing file or bad JSON is a ConfigError naming the file
// (and line and column for JSON errors).
// TrainerMon's config file (msprobe 26.2.0's keys, core/monitor_config.h) as the config of a
// session of task monitor whose files go under `output_root` (MONITOR_OUTPUT_DIR). Throws
// ConfigError.
Config load_monitor_config_file(const std::string& path, const std::string& output_root);
Config load_config_file(const std::string& path,
                        const nlohmann::json& overrides = nlohmann::json::object());

}  // namespace msprobe
