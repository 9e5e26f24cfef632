// Task monitor (issue 55): msprobe 26.2.0's TrainerMon, as the processor of a session of its own
// (registered in task_registry.cpp; python/msprobe_cpp/monitor.py installs it). Its CSVs are
// msprobe's (core/monitor_csv.h), its values msprobe's ops (monitor_stats.h), its steps
// msprobe's: the wrapper of the optimizer's step forwards each step here, which decides whether
// it is written (start_step, step_interval, collect_times, module_ranks) and what it holds.
// The modules' activations come from the observer hooks (live/hooks/module_observer.h) and the
// unreduced gradients from the accumulator hooks, both into MonitorHookRows; the alerts are
// MonitorAlerting's (docs/monitor.md, docs/decisions.md "The training monitor").
#pragma once

#include <pybind11/pybind11.h>

#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/monitor_config.h"
#include "core/monitor_csv.h"
#include "core/monitor_names.h"
#include "core/monitor_row_table.h"
#include "live/monitor/hook_rows.h"
#include "live/monitor/moment_prefetch.h"
#include "live/monitor/monitor_alerting.h"
#include "live/monitor/monitor_collectives.h"
#include "live/monitor/monitor_stacks.h"
#include "live/monitor/monitor_stats.h"
#include "live/monitor/step_parameter.h"
#include "live/session/task_processor.h"
#include "live/session/write_thread.h"

namespace msprobe {

class TrainerMonitor final : public TaskProcessor {
 public:
  explicit TrainerMonitor(const TaskParts& parts);
  ~TrainerMonitor();  // every step handed over is written first

  // set_monitor(): the first step's number (start_iteration), this rank (-1: not distributed)
  // and the micro steps of a step (grad_acc_steps); makes the run's folder,
  // <output root>/<time>-rank<R>-<id>, when this rank writes. A monitor that dynamic_on starts
  // (`starts_now`) writes from its first step on, into the run's folder made by the first one
  // (`run_folder`, "" for a new one), as msprobe's does.
  void begin(int64_t first_step, int rank, int64_t micro_steps, bool starts_now = false,
             const std::string& run_folder = "");
  // Where this rank stands for anomaly.json (pp_stage, group_mates) and each module's class by
  // "<vpp>:<name>" (the calls an alert names). Before the first step.
  void place(int pp_stage, std::vector<int> group_mates,
             std::map<std::string, std::string> module_classes);
  // Parameter `name` of model chunk `vpp_stage`: its tag ("0:fc1.weight") if the config's
  // targets take it, else none. Once per parameter, in the model's order (a squashed name taken
  // twice keeps its full name the second time).
  std::optional<std::string> parameter_tag(int vpp_stage, const std::string& name);
  // The watched parameters, in the model's order; with wg_distribution, the hooks on their
  // gradients' accumulation (grad_unreduced). GIL required.
  void watch(const std::vector<std::pair<std::string, at::Tensor>>& params);
  // With wg_distribution, watched parameter `tag`'s gradient as a rank hands it to a reduction
  // that sets the parameter's .grad itself (FSDP2's reduce-scatter): its grad_unreduced row.
  void unreduced(const std::string& tag, const at::Tensor& grad);
  // The process has peers (torch.distributed with more than one rank): what a collective writes
  // in place bumps no version, so each slot's tensor is read on its own (MonitorHookRows).
  void set_has_peers(bool peers) { hook_rows_->set_reuse_reads(!peers); }
  // Module `name` of model chunk `vpp_stage`: its tag if xy_distribution watches it.
  std::optional<std::string> module_tag(int vpp_stage, const std::string& name) const;
  // (pre_hook, forward_hook) for watched module "<vpp_stage>:<name>", to be registered with
  // with_kwargs=True. GIL required.
  pybind11::tuple module_hooks(const std::string& tag) const;
  // stack_info: the forward hook that records module `name`'s call stack (every module of
  // every chunk, on the ranks that write), else None. GIL required.
  pybind11::object stack_hook(int vpp_stage, const std::string& name);
  // Whether stack_info.csv is still to be written: its hooks are wanted until then.
  bool stacks_pending() const { return stacks_ && stacks_->pending(); }
  // At an optimizer step: whether it is written, and what the step wrapper hands over.
  struct StepReads {
    bool collects;    // the step is written
    bool grads;       // before_step reads the gradients (wg_distribution, mg_direction)
    bool moments;     // ... and the optimizer's moments (mv_distribution, mg_direction)
    bool after_step;  // after_step is called (param_distribution; moments read ahead)
  };
  StepReads step_reads() const;
  // Before the optimizer's step: grad_reduced, exp_avg and exp_avg_sq (where the optimizer has
  // state at all), param_origin. `params` in the model's order.
  void before_step(const std::vector<StepParameter>& params, bool optimizer_has_state);
  // After it: param_updated.
  void after_step(const std::vector<StepParameter>& params);
  // Hands the step's rows to the write thread when the step is written; then the next step.
  void end_step();
  // collect_times steps were written: msprobe removes its hooks.
  bool finished() const { return written_steps_ >= config_.schedule.collect_times; }
  const std::string& run_folder() const { return run_folder_; }
  // At an optimizer step, what ends the run as msprobe ends it (its exception's text), else "":
  // print_struct, once module_struct.json is written (the first time there is a structure to
  // write); cc_log_only, at the second step, once the collectives' stacks are said.
  std::string stops_run();
  // cc_distribution: what wraps torch.distributed's collectives, on the ranks that write;
  // else null.
  std::shared_ptr<MonitorCollectives> collectives() const {
    return run_folder_.empty() ? nullptr : collectives_;
  }
  // Returns once every step handed over is on disk; says the writes that failed.
  void drain();

 private:
  bool collects_at(int64_t step) const;
  std::vector<MonitorValue> values_of(const at::Tensor& t) const;
  std::vector<MonitorValue> missing_values() const;
  // What writes `table`'s rows of this step, to be run by the write thread (null: nothing).
  std::function<void()> table_job(const std::string& prefix, MonitorRowTable table);
  void failed(const std::string& why);
  void write_anomalies();
  void put_mg_direction(const std::vector<StepParameter>& params);
  void start_events();
  std::string earlier_run_folder(int rank) const;
  std::function<void()> events_job(const std::string& prefix, MonitorRowTable table);
  std::function<void()> other_job();
  // The job appending this step's rows of `prefix` to its CSV (the header first into a new
  // file); `rows_text(ndigits)` makes their text on the write thread.
  std::function<void()> csv_job(const std::string& prefix, bool micro_step,
                                std::function<std::string(int)> rows_text);
  void append(const std::string& path, std::string bytes);
  void write_text(const std::string& path, std::string text);
  void say_failures();

  const MonitorConfig config_;
  // "<root>/Dec06_06-45-53": the output root and when the monitor was made (msprobe's name).
  const std::string run_prefix_;
  MonitorNames names_;
  std::string run_folder_;
  std::string events_file_;  // format "tensorboard": the run's event file, else ""
  int64_t step_ = 0;
  int64_t start_step_ = 0;  // the config's start_step, or the step dynamic_on started it at
  int rank_ = -1;
  int64_t written_steps_ = 0;
  struct Said {
    bool no_state = false;  // "optimizer state can not accessed", once
    bool no_guard = false;  // alert.dump_step_on without a guard, once
  } said_;
  // msprobe never clears its gradient rows: a name not refreshed in a step is written again
  // with its last values. The others are this step's.
  struct StepTables {
    MonitorRowTable grad_reduced, exp_avg, exp_avg_sq, param_origin, param_updated;
    MonitorRowTable other;  // mg_direction
    MonitorCollectives::Rows collectives;  // cc_distribution's rows of `other`
  };
  StepTables tables_;
  const std::shared_ptr<MonitorHookRows> hook_rows_;  // what the hooks saw this step
  MonitorAlerting alerting_;
  const std::shared_ptr<MonitorStacks> stacks_;  // stack_info, else null
  const std::shared_ptr<MonitorCollectives> collectives_;  // cc_distribution, else null
  const std::unique_ptr<MomentPrefetch> moments_ahead_;      // mv_distribution, else null
  std::vector<std::shared_ptr<void>> grad_hooks_;  // on_accumulated_grad's tokens
  std::mutex failed_mu_;
  std::vector<std::string> failed_;  // the write thread's errors, said by the training thread
  WriteThread writes_;               // last: its destructor finishes the jobs first
};

}  // namespace msprobe
