#include "live/monitor/trainer_monitor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>

#include <ATen/core/grad_mode.h>

#include <unistd.h>

#include "core/config.h"
#include "core/config_error.h"
#include "core/monitor_append.h"
#include "core/monitor_events.h"
#include "core/tensorboard_events.h"
#include "live/crossing/python_crossing.h"
#include "live/hooks/parameter_grads.h"
#include "live/log/tool_log.h"
#include "live/monitor/monitor_stats.h"
#include "live/session/session.h"

namespace msprobe {
namespace {

// msprobe names its run folder by the time in Asia/Shanghai (UTC+8, no daylight saving):
// "Dec06_06-45-53".
std::string shanghai_time_tag() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  const std::time_t shifted = now + 8 * 3600;
  std::tm parts{};
  gmtime_r(&shifted, &parts);
  char text[32];
  std::strftime(text, sizeof text, "%b%d_%H-%M-%S", &parts);
  return text;
}

// The first 8 characters of a uuid4: hex digits.
std::string run_id() {
  std::random_device device;
  char text[16];
  std::snprintf(text, sizeof text, "%08x", static_cast<unsigned>(device()));
  return text;
}

}  // namespace

TrainerMonitor::TrainerMonitor(const TaskParts& parts)
    : config_(parts.config.monitor),
      run_prefix_((std::filesystem::path(parts.config.dump_path) / shanghai_time_tag()).string()),
      names_(config_.targets, config_.output.squash_name,
             config_.families.all_xy || config_.output.print_struct),
      hook_rows_(std::make_shared<MonitorHookRows>(monitor_metrics(config_),
                                                   config_.families.monitor_mbs_grad,
                                                   config_.output.print_struct)),
      alerting_(config_, parts.config.dump_path, parts.config.overflow_check.headroom, hook_rows_),
      stacks_(config_.output.stack_info ? std::make_shared<MonitorStacks>() : nullptr),
      collectives_(config_.collectives.enable
                       ? std::make_shared<MonitorCollectives>(config_.collectives, hook_rows_->metrics())
                       : nullptr),
      moments_ahead_(config_.families.mv_distribution
                         ? std::make_unique<MomentPrefetch>(hook_rows_->metrics())
                         : nullptr) {
  for (const std::string& note : config_.notes) say_warning(note);
}

TrainerMonitor::~TrainerMonitor() {
  writes_.drain();
}

void TrainerMonitor::begin(int64_t first_step, int rank, int64_t micro_steps, bool starts_now,
                           const std::string& run_folder) {
  step_ = first_step;
  start_step_ = starts_now ? first_step : config_.schedule.start_step;
  rank_ = rank;
  hook_rows_->set_micro_steps(micro_steps);
  hook_rows_->set_collecting(collects_at(step_));
  // msprobe makes its writer, and the run's folder, only on the ranks that write.
  const auto& ranks = config_.output.module_ranks;
  if (!ranks.empty() && std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) return;
  run_folder_ = !run_folder.empty() ? run_folder : earlier_run_folder(rank);
  if (run_folder_.empty()) {
    run_folder_ = run_prefix_ + "-rank" + std::to_string(rank < 0 ? 0 : rank) + "-" + run_id();
  }
  std::error_code ec;
  std::filesystem::create_directories(run_folder_, ec);
  if (ec) failed(run_folder_ + ": cannot make the run's folder: " + ec.message());
  if (config_.output.format == MonitorOutput::Format::TensorBoard) start_events();
  // msprobe's anomaly.json is beside the run folders, reset to {} when the monitor starts.
  const std::string anomaly_folder = alerting_.begin(rank);
  if (anomaly_folder.empty()) return;
  std::filesystem::create_directories(anomaly_folder, ec);
  if (ec) failed(anomaly_folder + ": cannot make the folder: " + ec.message());
  write_text(anomaly_folder + "/anomaly.json", "{}");
  std::filesystem::remove(anomaly_folder + "/anomaly_context.json", ec);
}

std::string TrainerMonitor::earlier_run_folder(int rank) const {
  // append_output, in a distributed run (as msprobe's): this rank's folder among the earlier
  // run's, else "" (a new one, which msprobe does not make).
  const auto& tags = config_.output.append_output;
  if (tags.size() != 2 || rank < 0) return "";
  const std::filesystem::path root = std::filesystem::path(run_prefix_).parent_path();
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    if (entry.is_directory(ec)) names.push_back(entry.path().filename().string());
  }
  const auto folders = monitor_append_folders(names, tags[0], tags[1]);
  const auto it = folders.find(rank);
  if (it == folders.end()) {
    say_warning(config_.source + ": append_output: no run folder of rank " +
                std::to_string(rank) + " from " + tags[0] + " to " + tags[1] +
                " under " + root.string() + ": a new one is made");
    return "";
  }
  say(LogLevel::Info, "append rank(" + std::to_string(rank) + ") result to " +
                          (root / it->second).string());
  return (root / it->second).string();
}

void TrainerMonitor::start_events() {
  // TensorBoard's own writer names its file after the host, the process and a counter.
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const double now = std::chrono::duration<double>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  events_file_ = (std::filesystem::path(run_folder_) /
                  tensorboard_file_name(now, std::string(host) + "." +
                                                 std::to_string(getpid()) + ".0"))
                     .string();
  append(events_file_, tensorboard_file_version_record(now));
}

void TrainerMonitor::place(int pp_stage, std::vector<int> group_mates,
                           std::map<std::string, std::string> module_classes) {
  alerting_.place(pp_stage, std::move(group_mates), std::move(module_classes));
}

std::optional<std::string> TrainerMonitor::parameter_tag(int vpp_stage, const std::string& name) {
  return names_.parameter(vpp_stage, name);
}

void TrainerMonitor::watch(const std::vector<std::pair<std::string, at::Tensor>>& params) {
  PythonCrossing::assert_gil();
  if (!config_.families.wg_distribution) return;
  size_t empty = 0;
  for (const auto& [name, param] : params) {
    // A parameter that holds no elements now is one DeepSpeed ZeRO-3 partitioned (it gathers it
    // around each forward): its gradient accumulator, made now, would fix its shape at zero, and
    // the next backward would fail on the gathered parameter's gradient. It is not watched.
    if (param.numel() == 0) {
      ++empty;
      continue;
    }
    auto after = [rows = hook_rows_, name = name](const at::Tensor& p) {
      if (p.grad().defined()) rows->accumulated(name, p.grad());
    };
    if (auto token = on_accumulated_grad(param, std::move(after))) grad_hooks_.push_back(token);
  }
  if (empty > 0) {
    say_warning("wg_distribution: " + std::to_string(empty) +
                " parameters hold no elements now (DeepSpeed ZeRO-3 partitions them): their "
                "accumulated gradients are not watched (no grad_unreduced rows for them)");
  }
}

void TrainerMonitor::unreduced(const std::string& tag, const at::Tensor& grad) {
  if (config_.families.wg_distribution && grad.defined()) hook_rows_->accumulated(tag, grad);
}

std::optional<std::string> TrainerMonitor::module_tag(int vpp_stage,
                                                      const std::string& name) const {
  if (!config_.families.xy_distribution && !config_.output.print_struct) return std::nullopt;
  return names_.module(vpp_stage, name);
}

pybind11::tuple TrainerMonitor::module_hooks(const std::string& tag) const {
  PythonCrossing::assert_gil();
  const MonitorFamilies& f = config_.families;
  return make_observer_hooks(hook_rows_, tag, !f.backward_only, !f.forward_only);
}

pybind11::object TrainerMonitor::stack_hook(int vpp_stage, const std::string& name) {
  PythonCrossing::assert_gil();
  // msprobe hooks no module on a rank that module_ranks leaves out.
  if (!stacks_ || run_folder_.empty()) return pybind11::none();
  const std::string shown = config_.output.squash_name ? monitor_squash_name(name) : name;
  return stacks_->hook(std::to_string(vpp_stage) + ":" + shown);
}

TrainerMonitor::StepReads TrainerMonitor::step_reads() const {
  const MonitorFamilies& f = config_.families;
  return {collects_at(step_), f.wg_distribution || f.mg_direction,
          f.mv_distribution || f.mg_direction,
          f.param_distribution || moments_ahead_ != nullptr};
}

bool TrainerMonitor::collects_at(int64_t step) const {
  const MonitorSchedule& s = config_.schedule;
  if (finished() || step < start_step_ || (step - start_step_) % s.step_interval != 0) {
    return false;
  }
  const auto& ranks = config_.output.module_ranks;
  if (ranks.empty()) return true;
  return rank_ >= 0 && std::find(ranks.begin(), ranks.end(), rank_) != ranks.end();
}

std::vector<MonitorValue> TrainerMonitor::values_of(const at::Tensor& t) const {
  return monitor_values(t, hook_rows_->metrics());
}

std::vector<MonitorValue> TrainerMonitor::missing_values() const {
  // msprobe fills a value that is not a tensor with nan, shape and dtype too.
  return std::vector<MonitorValue>(config_.output.ops.size(),
                                   MonitorValue::of_real(std::nan("")));
}

void TrainerMonitor::before_step(const std::vector<StepParameter>& params,
                                 bool optimizer_has_state) {
  if (config_.families.wg_distribution) {
    for (const StepParameter& p : params) {
      if (!p.grad.defined()) continue;
      hook_rows_->register_call(p.name, "/post_grad");
      tables_.grad_reduced.put(p.name, hook_rows_->values(p.grad));
    }
  }
  tables_.exp_avg.clear();
  tables_.exp_avg_sq.clear();
  const bool moments = config_.families.mv_distribution || config_.families.mg_direction;
  if (moments && !optimizer_has_state && !said_.no_state) {
    said_.no_state = true;  // msprobe's line, said once: Adam has no state before its first step
    say_warning("optimizer state can not accessed");
  }
  if (config_.families.mv_distribution) {
    // msprobe numbers every watched parameter's moments in its call ids, state or not.
    for (const char* family : {"/exp_avg", "/exp_avg_sq"}) {
      for (const StepParameter& p : params) hook_rows_->register_call(p.name, family);
    }
  }
  if (config_.families.mv_distribution && optimizer_has_state) {
    for (const StepParameter& p : params) {
      if (!p.in_state) continue;
      const auto of = [this](const at::Tensor& t) {
        if (!t.defined()) return missing_values();
        std::optional<std::vector<MonitorValue>> ahead = moments_ahead_->take(t);
        return ahead ? std::move(*ahead) : values_of(t);
      };
      tables_.exp_avg.put(p.name, of(p.exp_avg));
      tables_.exp_avg_sq.put(p.name, of(p.exp_avg_sq));
    }
    moments_ahead_->forget();
  }
  if (config_.families.param_distribution) {
    for (const StepParameter& p : params) {
      if (p.param.numel() != 0) tables_.param_origin.put(p.name, values_of(p.param));
    }
  }
  if (config_.families.mg_direction) put_mg_direction(params);
  // msprobe folds the collectives' calls since the last written step into this one's.
  if (collectives_ && !collectives_->log_only()) {
    tables_.collectives = collectives_->take_rows(step_);
  }
}

void TrainerMonitor::put_mg_direction(const std::vector<StepParameter>& params) {
  // msprobe's share of elements whose gradient and first moment agree in sign, 1.0 at step 0.
  for (const StepParameter& p : params) {
    hook_rows_->register_call(p.name, "/mg_direction");
    if (!p.grad.defined()) {
      say_warning("grad is None: " + p.name + ", maybe something wrong happened.");
      continue;
    }
    at::Tensor ratio;
    if (step_ == 0 || !p.exp_avg.defined() || p.exp_avg.numel() == 0) {
      ratio = at::scalar_tensor(1.0, at::kFloat);
    } else {
      at::NoGradGuard no_grad;
      const at::Tensor signs = p.grad.sign() * p.exp_avg.sign();
      ratio = (signs.sum() / p.exp_avg.numel() + 1) / 2;
    }
    tables_.other.put(p.name, values_of(ratio));
  }
}

void TrainerMonitor::after_step(const std::vector<StepParameter>& params) {
  if (config_.families.param_distribution) {
    for (const StepParameter& p : params) {
      if (p.param.numel() != 0) tables_.param_updated.put(p.name, values_of(p.param));
    }
  }
  // The next step's moments are this step's result: read while the next step's forward runs.
  if (moments_ahead_ && written_steps_ + 1 < config_.schedule.collect_times &&
      collects_at(step_ + 1)) {
    moments_ahead_->read_ahead(params);
  }
}

std::function<void()> TrainerMonitor::table_job(const std::string& prefix, MonitorRowTable table) {
  if (table.empty() || run_folder_.empty()) return nullptr;
  if (alerting_.on()) alerting_.scan(prefix, table, step_);
  if (!events_file_.empty()) return events_job(prefix, std::move(table));
  const bool micro_step = prefix == "actv" || prefix == "actv_grad" ||
                          (prefix == "grad_unreduced" && config_.families.monitor_mbs_grad);
  // The rows and their text are made by the write thread: the step hands over its table and
  // goes on.
  return csv_job(prefix, micro_step, [table = std::move(table), step = step_](int ndigits) {
    return monitor_csv_rows(table.rows(step), ndigits);
  });
}

std::function<void()> TrainerMonitor::csv_job(const std::string& prefix, bool micro_step,
                                              std::function<std::string(int)> rows_text) {
  // The file's path and header too are made by the write thread, from what is known now.
  return [this, prefix, micro_step, step = step_, rows_text = std::move(rows_text)] {
    const std::string path =
        (std::filesystem::path(run_folder_) /
         monitor_csv_name(prefix, step, config_.schedule.step_count_per_record))
            .string();
    std::vector<std::string> op_names;
    for (MonitorOp op : config_.output.ops) op_names.emplace_back(monitor_op_name(op));
    const std::string header = monitor_csv_header(micro_step, op_names);
    const int ndigits = config_.output.ndigits;
    std::error_code ec;
    const bool is_new = !std::filesystem::exists(path, ec);
    std::ofstream out(path, std::ios::app | std::ios::binary);
    if (is_new) out << header;
    out << rows_text(ndigits);
    out.flush();
    if (!out) failed(path + ": cannot write");
  };
}

std::function<void()> TrainerMonitor::events_job(const std::string& prefix,
                                                 MonitorRowTable table) {
  const double now = std::chrono::duration<double>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  const std::string tail =
      "/rank" + std::to_string(rank_ < 0 ? 0 : rank_) + "/" + monitor_family_tag(prefix);
  return [this, table = std::move(table), tail, step = step_, now] {
    const std::string bytes = monitor_event_records(table, tail, config_.output.ops, step, now);
    std::ofstream out(events_file_, std::ios::app | std::ios::binary);
    out << bytes;
    out.flush();
    if (!out) failed(events_file_ + ": cannot write");
  };
}

std::function<void()> TrainerMonitor::other_job() {
  // mg_direction's rows, then the collectives' (CSV only: msprobe 26.2.0 writes no TensorBoard).
  if (run_folder_.empty()) return nullptr;
  if (alerting_.on()) {  // msprobe scans them as one family: mg_direction's, then each slot's
    if (!tables_.other.empty()) alerting_.scan("other", tables_.other, step_);
    alerting_.scan_collectives(tables_.collectives.slots, step_);
  }
  if (!events_file_.empty()) return nullptr;
  std::vector<std::vector<MonitorValue>> cells;
  for (const MonitorRow& row : tables_.other.rows(step_)) cells.push_back(monitor_row_cells(row));
  for (auto& row : tables_.collectives.cells) cells.push_back(std::move(row));
  return csv_job("other", false, [cells = std::move(cells)](int ndigits) {
    return monitor_csv_cells(cells, ndigits);
  });
}

void TrainerMonitor::append(const std::string& path, std::string bytes) {
  writes_.post([this, path, bytes = std::move(bytes)] {
    std::ofstream out(path, std::ios::app | std::ios::binary);
    out << bytes;
    out.flush();
    if (!out) failed(path + ": cannot write");
  });
}

void TrainerMonitor::end_step() {
  if (collects_at(step_)) {
    ++written_steps_;
    // One job for the step's files: each hand-over to the write thread costs a wake-up.
    std::vector<std::function<void()>> jobs;
    const auto add = [&](const std::string& prefix, MonitorRowTable table) {
      if (auto job = table_job(prefix, std::move(table))) jobs.push_back(std::move(job));
    };
    hook_rows_->take(add);
    add("grad_reduced", tables_.grad_reduced);
    add("exp_avg", tables_.exp_avg);
    add("exp_avg_sq", tables_.exp_avg_sq);
    add("param_origin", tables_.param_origin);
    add("param_updated", tables_.param_updated);
    if (tables_.collectives.empty()) {
      add("other", tables_.other);  // a copy: the tags stay known
    } else if (auto job = other_job()) {
      jobs.push_back(std::move(job));
    }
    tables_.other.clear();
    tables_.collectives = {};
    if (!jobs.empty()) {
      writes_.post([jobs = std::move(jobs)] {
        for (const auto& job : jobs) job();
      });
    }
    write_anomalies();
    if (stacks_pending() && !run_folder_.empty()) {
      write_text((std::filesystem::path(run_folder_) / "stack_info.csv").string(),
                 stacks_->take_csv());
    }
    hook_rows_->reset_calls();
  }
  ++step_;
  hook_rows_->set_collecting(collects_at(step_));
  if (finished()) grad_hooks_.clear();  // msprobe removes its hooks after collect_times steps
  say_failures();
}

void TrainerMonitor::write_anomalies() {
  for (auto& [path, text] : alerting_.step_written()) write_text(path, std::move(text));
  const std::string alert = alerting_.take_dump_reason();
  if (alert.empty()) return;
  // alert.dump_step_on: the guard's step is written, the evidence on disk before any NaN.
  const std::shared_ptr<Session> guarded = current_session();
  if (guarded && guarded->config().task == Task::OverflowCheck) {
    guarded->guard().flag_for_monitor(alert);
  } else if (!std::exchange(said_.no_guard, true)) {
    say_warning(config_.source + ": alert.dump_step_on: no PrecisionDebugger of task "
                "overflow_check is running: its alerts flag no dump");
  }
}

void TrainerMonitor::write_text(const std::string& path, std::string text) {
  writes_.post([this, path, text = std::move(text)] {
    const std::string part = path + ".part";
    {
      std::ofstream out(part, std::ios::trunc | std::ios::binary);
      out << text;
      out.flush();
      if (!out) return failed(path + ": cannot write");
    }
    std::error_code ec;
    std::filesystem::rename(part, path, ec);  // whole or not at all
    if (ec) failed(path + ": cannot write: " + ec.message());
  });
}

std::string TrainerMonitor::stops_run() {
  if (collectives_ && collectives_->log_only() && step_ > 0) {
    const auto& ranks = config_.output.module_ranks;
    const int64_t first = ranks.empty() ? 0 : *std::min_element(ranks.begin(), ranks.end());
    if (rank_ <= first) {  // msprobe says it on the smallest rank
      say(LogLevel::Info, "> Used communication ops and corresponding stack");
      say(LogLevel::Info, collectives_->logged_stacks());
    }
    return "exit after first step when print cc stack";
  }
  const std::string text = hook_rows_->structure_file();
  if (text.empty()) return "";
  const std::filesystem::path folder = std::filesystem::path(run_prefix_).parent_path() /
                                       "module_struct" /
                                       ("rank" + std::to_string(rank_ < 0 ? 0 : rank_));
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  const std::string path = (folder / "module_struct.json").string();
  std::ofstream out(path, std::ios::trunc | std::ios::binary);
  out << text;
  out.flush();
  if (!out) throw std::runtime_error(path + ": cannot write the modules' structure");
  say(LogLevel::Info, "> save module struct to " + path);
  return collectives_ && collectives_->log_only()
             ? ""
             : "exit after first monitor step when print model struct";
}

void TrainerMonitor::drain() {
  writes_.drain();
  say_failures();
}

void TrainerMonitor::say_failures() {
  std::vector<std::string> said;
  {
    std::lock_guard<std::mutex> lock(failed_mu_);
    said.swap(failed_);
  }
  for (const std::string& why : said) say_warning("the training monitor: " + why);
}

void TrainerMonitor::failed(const std::string& why) {
  std::lock_guard<std::mutex> lock(failed_mu_);
  if (failed_.size() < 8) failed_.push_back(why);
}

}  // namespace msprobe
