#include "torch/session.h"

#include <pybind11/pybind11.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <set>

#include "core/dump_writer.h"
#include "core/json_writer.h"
#include "core/output_files.h"
#include "torch/hook_scope.h"
#include "torch/overflow_raise.h"

namespace msprobe {

namespace {

std::shared_ptr<Session> g_session;  // accessed with std::atomic_load/store
std::atomic<uint64_t> g_epochs{0};

}  // namespace

std::shared_ptr<Session> current_session() {
  return std::atomic_load(&g_session);
}
void set_current_session(std::shared_ptr<Session> s) {
  std::atomic_store(&g_session, std::move(s));
}

namespace {

// A dump_path that can never be written is a config error, found before any hook goes in. The
// folder itself is not created here: task overflow_check creates nothing for a clean run.
void check_writable(const std::string& path, const std::string& source) {
  namespace fs = std::filesystem;
  fs::path p(path);
  std::error_code ec;
  while (!p.empty() && !fs::exists(p, ec)) p = p.parent_path();
  std::string reason;
  if (p.empty()) {
    reason = "no existing parent folder";
  } else if (!fs::is_directory(p, ec)) {
    reason = "\"" + p.string() + "\" is not a folder";
  } else if (access(p.c_str(), W_OK | X_OK) != 0) {
    reason = "\"" + p.string() + "\" is not writable";
  }
  if (!reason.empty()) {
    throw ConfigError(source + ": dump_path: cannot write dumps under \"" + path + "\": " + reason);
  }
}

std::string section_name(const Config& c, const std::string& source) {
  return source + ": " + (c.task == Task::Tensor ? "tensor" : "statistics");
}

}  // namespace

Session::Session(Config config, std::string package_dir, const std::string& source,
                 std::string library_dir)
    : config_(std::move(config)),
      package_dir_(std::move(package_dir)),
      selection_(config_.collect(), config_.level, section_name(config_, source)),
      library_dir_(std::move(library_dir)) {
  epoch_ = ++g_epochs;
  options_.md5 =
      config_.task == Task::Statistics && config_.statistics.summary_mode == SummaryMode::Md5;
  options_.cache = &stats_cache_;
  options_.file_names = &file_names_;
  // md5 and tensor need the bytes on the host anyway; their statistics come back at once.
  if (!options_.md5 && config_.task != Task::Tensor) options_.pending = &pending_stats_;

  if (config_.task == Task::OverflowCheck) {
    try {
      watch_ = std::make_unique<OverflowWatch>(config_, models_);
    } catch (const RulesError& e) {
      // A rules file the config names is part of the config: its error names both.
      throw ConfigError(source + ": overflow_check.rules: " + e.what());
    }
  }
  std::error_code ec;
  const auto abs = std::filesystem::absolute(config_.dump_path, ec);
  dump_root_ = ec ? config_.dump_path : abs.lexically_normal().string();
  while (dump_root_.size() > 1 && dump_root_.back() == '/') dump_root_.pop_back();
  check_writable(dump_root_, source);
  if (config_.task != Task::Statistics) saver_ = std::make_unique<TensorSaver>(dump_root_);
}

Session::~Session() {
  collecting_ = false;
  if (!py_) return;
  if (!Py_IsInitialized()) {
    // The interpreter is gone, and with it the objects: nothing may be released any more.
    py_->overflow_type.release();
    py_->error_type.release();
    py_->on_flagged.release();
    py_->queue_callback.release();
    return;
  }
  pybind11::gil_scoped_acquire gil;
  py_.reset();
}

void Session::set_python_side(std::unique_ptr<PythonSide> side) {
  py_ = std::move(side);
}

bool Session::finished() const {
  const auto& ranges = config_.step.ranges();
  if (ranges.empty()) return false;
  int64_t last = 0;
  for (const auto& r : ranges) last = std::max(last, r.second);
  return step_ > last;
}

std::string Session::step_dir() const {
  return dump_root_ + "/step" + std::to_string(step_) + "/" +
         (rank_ < 0 ? std::string("rank") : "rank" + std::to_string(rank_));
}

void Session::start(int rank) {
  // A forward that an exception cut short (an overflow stop, a user's error) left its module
  // calls open on this thread.
  clear_module_calls();
  ended_by_raise_ = false;
  if (!cleaned_temporaries_) {
    // What a run killed mid-write left in this rank's folders (other ranks may be writing theirs).
    cleaned_temporaries_ = true;
    const std::string rank_dir = rank < 0 ? "rank" : "rank" + std::to_string(rank);
    std::error_code ec;
    for (const auto& step : std::filesystem::directory_iterator(dump_root_, ec)) {
      if (step.is_directory(ec) && !step.is_symlink(ec)) {
        remove_stale_temporaries((step.path() / rank_dir).string());
      }
    }
  }
  if (!step_began_) {
    step_began_ = true;
    if (watch_) models_.new_step();  // what "written before this step began" compares with
  }
  rank_ = rank;
  if (saver_) options_.tensor_dir = step_dir() + "/dump_tensor_data";
  if (config_.task == Task::Tensor) options_.saver = saver_.get();
  const bool rank_ok =
      rank < 0 ? config_.rank.all() || config_.rank.contains(0) : config_.rank.contains(rank);
  collecting_ = rank_ok && config_.step.contains(step_) && !finished();
  if (collecting_) collected_this_step_ = true;
}

void Session::warn_unmatched_selection() {
  if (!collected_this_step_ || !selection_.filters()) return;
  const std::string section = config_.task == Task::Tensor ? "tensor" : "statistics";
  for (const std::string& entry : selection_.unmatched()) {
    if (!warned_.insert(entry).second) continue;
    std::fprintf(stderr,
                 "msprobe_cpp: warning: %s.%s matched no call in step %lld (names look like "
                 "\"Functional.relu.0.forward\" or \"Module.fc1.Linear.forward.0\"; an "
                 "unfiltered run's dump.json lists them)\n",
                 section.c_str(), entry.c_str(), static_cast<long long>(step_));
  }
}

void Session::pause() {
  collecting_ = false;
}

void Session::stop() {
  collecting_ = false;
  // A scaled step is written at step(), once the loss scaler has said whether it skipped it.
  if (dirty_ && !loss_scaled_) write_step_or_report();
}

void Session::step() {
  collecting_ = false;
  if (ended_by_raise_) {  // the raise already ended this step
    ended_by_raise_ = false;
    return;
  }
  if (dirty_) write_step_or_report();
  warn_unmatched_selection();
  advance();
}

std::string Session::end_step_for_raise() {
  collecting_ = false;
  std::string write_error;
  if (dirty_) write_error = write_step_or_report();
  advance();
  ended_by_raise_ = true;
  return write_error;
}

void Session::advance() {
  clear_step();
  pending_stats_.clear();
  stats_cache_.clear();
  file_names_.clear();
  selection_.new_step();
  if (watch_) watch_->new_step();
  step_began_ = false;
  step_overflow_.reset();
  step_absorbed_.reset();
  pending_backward_.reset();
  reached_gradients_.reset();
  end_of_backward_queued_ = false;
  loss_scaled_ = false;
  skipped_by_scaler_ = false;
  step_dumped_ = false;
  collected_this_step_ = false;
  ++step_;
  epoch_ = ++g_epochs;
}

void Session::mark_compiled_output(const at::Tensor& t) {
  std::lock_guard<std::mutex> lock(mu_);
  if (watch_) watch_->mark_compiled_output(t);
}

bool Session::warn_once(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  return warned_.insert(what).second;
}

int64_t Session::next_index(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_[key]++;
}

std::optional<OverflowEvent> Session::add(StoredCall&& call, const LiveTensors* live) {
  std::unique_lock<std::mutex> lock(mu_);
  std::optional<OverflowEvent> event;
  StackPtr stack;
  bool absorbed_to_tell = false;
  if (watch_) {
    static const LiveTensors kNone;
    const LiveTensors& tensors = live ? *live : kNone;
    const Verdict v = watch_->judge(call.record, tensors, call.peer_rank);
    // Explained calls (every masked score of a causal model) are no evidence: their tensors are
    // not kept, which also keeps the explained path as cheap as the clean one.
    if (v.finding && v.judgement != Judgement::Explained && dump_budget_left()) {
      keep_tensors(call, tensors);
    }
    OverflowEvent e;
    if (v.end_of_backward) {
      e.queue_end_of_backward = !end_of_backward_queued_;
      end_of_backward_queued_ = true;
    }
    // A backward op origin is told at the end of the pass, once it is known whether it mattered.
    // After a backward op origin, what follows in the step (an optimizer or a loss scaler reading
    // the gradients) is its consequence, not the step's story.
    // An absorbed anomaly is no overflow: no on_overflow, no debugger.overflow; the step's first
    // one is told in one line and kept for the report.
    const bool absorbed = v.judgement == Judgement::Absorbed && !v.stop;
    // In a step whose loss a scaler scaled, non-finite gradients are the scaler's to skip: a
    // backward finding waits for step() (an op origin waits for the end of the pass first). A
    // GradScaler under autocast overflows in casts that no hooked call makes, so the first
    // anomalous backward record often has no origin of its own.
    const bool scaled_backward = loss_scaled_ && !v.end_of_backward && v.flagged && !v.stop &&
                                 is_backward_name(call.record.name);
    e.notify = v.flagged && !absorbed && !v.end_of_backward && !scaled_backward &&
               !step_overflow_ && !pending_backward_ && !reached_gradients_;
    e.raise = v.stop;
    const bool first_backward = v.end_of_backward && !pending_backward_;
    const bool first_scaled = scaled_backward && !reached_gradients_ && !pending_backward_;
    if (first_scaled) reached_gradients_ = describe_overflow(call, v, tensors);
    const bool first_absorbed = absorbed && v.flagged && !step_absorbed_;
    if (e.notify || e.raise || first_backward || first_absorbed) {
      e.facts = describe_overflow(call, v, tensors);
      stack = call.stack;
      if (first_backward) pending_backward_ = e.facts;
      if (e.notify) step_overflow_ = e.facts;
      if (first_absorbed) step_absorbed_ = e.facts;
    }
    if (first_absorbed) absorbed_to_tell = true;
    if (e.notify || e.raise || e.queue_end_of_backward) event = std::move(e);
    if (first_scaled) stack = call.stack;
    if (!event && !first_absorbed && !first_scaled) stack.reset();
  }
  const std::string told_call = stack ? call.record.name : std::string();  // the facts' call
  calls_.push_back(std::move(call));
  dirty_ = true;
  lock.unlock();
  // The source line needs the GIL, which must never be waited for while holding mu_: a thread
  // holding the GIL may be waiting for mu_ (backward recorders run without the GIL).
  if (stack) {
    std::optional<std::string> source;
    {
      pybind11::gil_scoped_acquire gil;
      source = codes_.first_frame_outside(*stack, {package_dir_, library_dir_});
    }
    if (event) event->facts.source = source;
    lock.lock();
    for (auto* stored :
         {&pending_backward_, &step_overflow_, &step_absorbed_, &reached_gradients_}) {
      if (*stored && !(*stored)->source && (*stored)->finding.call == told_call) {
        (*stored)->source = source;
      }
    }
    lock.unlock();
  }
  if (absorbed_to_tell) {
    lock.lock();
    const std::string line = step_absorbed_ ? step_absorbed_->absorbed_line() : std::string();
    lock.unlock();
    const std::string who = rank_ >= 0 ? "[rank " + std::to_string(rank_) + "] " : "";
    if (!line.empty()) std::fprintf(stderr, "%s%s\n", who.c_str(), line.c_str());
  }
  return event;
}

std::string Session::write_step_or_report() {
  try {
    write_step();
  } catch (const WriteError& e) {
    // The run being observed goes on: a full disk or a blocked folder costs the dump, not the
    // training. Said once per session.
    dirty_ = false;
    if (!reported_write_error_) {
      std::fprintf(stderr, "msprobe_cpp: the dump of step %lld could not be written: %s\n",
                   static_cast<long long>(step_), e.what());
      reported_write_error_ = true;
    }
    return e.what();
  }
  return "";
}

void Session::clear_step() {
  std::lock_guard<std::mutex> lock(mu_);
  calls_.clear();
  counters_.clear();
  dirty_ = false;
}

void Session::write_step() {
  std::vector<const CallRecord*> records;
  std::lock_guard<std::mutex> lock(mu_);
  // Task overflow_check writes only the steps it flagged; a clean step leaves nothing.
  if (watch_ && !should_dump_step()) {
    dirty_ = false;
    return;
  }
  records.reserve(calls_.size());
  for (const StoredCall& c : calls_) records.push_back(&c.record);

  const std::string dir = step_dir();
  // A step that cannot be completed (a full disk) leaves nothing: neither files that no
  // dump.json names nor empty folders.
  std::vector<std::string> written;
  try {
    write_step_files(dir, records, written);
  } catch (const WriteError& e) {
    for (const std::string& f : written) unlink(f.c_str());
    if (saver_) remove_empty_folders(options_.tensor_dir, dump_root_);
    remove_empty_folders(dir, dump_root_);
    if (watch_) print_overflow_summary(std::string("not written: ") + e.what());
    throw;
  }
  if (watch_) print_overflow_summary(dir + "  (msprobe-cpp check " + dir + "/dump.json)");
  dirty_ = false;
}

void Session::write_step_files(const std::string& dir,
                               const std::vector<const CallRecord*>& records,
                               std::vector<std::string>& written) {
  make_dirs(dir, dump_root_);
  DumpHead head{to_string(config_.task), to_string(config_.level), std::nullopt};
  if (saver_) {
    for (StoredCall& c : calls_) {
      for (auto& [tensor, name] : c.tensors) saver_->save(tensor, options_.tensor_dir + "/" + name);
      c.tensors.clear();
    }
    const std::string error = saver_->flush();
    if (!error.empty() && !reported_write_error_) {
      // Training goes on: a full disk must not kill the run being observed.
      std::fprintf(stderr,
                   "msprobe_cpp: saving tensors failed at step %lld: %s; tensor saving stops, and "
                   "this step's dump keeps statistics only\n",
                   static_cast<long long>(step_), error.c_str());
      reported_write_error_ = true;
    }
    if (saver_->stopped()) {
      // A step's tensors are all saved or none: the files of a partial set are removed (which
      // also gives the statistics room), and dump.json names no file.
      for (StoredCall& c : calls_) {
        for_each_entry(c.record, [&](Entry& e) {
          if (e.data_name.empty()) return;
          unlink((options_.tensor_dir + "/" + e.data_name).c_str());
          e.data_name.clear();
        });
      }
      remove_empty_folders(options_.tensor_dir, dir);
    } else {
      head.dump_data_dir = options_.tensor_dir;
      for (StoredCall& c : calls_) {
        for_each_entry(c.record, [&](Entry& e) {
          if (!e.data_name.empty()) written.push_back(options_.tensor_dir + "/" + e.data_name);
        });
      }
    }
  }
  // Written last: a step folder that has a dump.json has everything else too (tensors first,
  // then stack.json, construct.json and the overflow report), even after a kill.
  JsonWriter stack(1, std::move(json_buffer_));
  stack.begin_object();
  for (const StoredCall& c : calls_) {
    // msprobe writes no stack for backward records: the engine runs them, not a Python line. (We
    // keep the forward's stack in memory, for the source line an overflow stop names.)
    if (is_backward_name(c.record.name)) continue;
    stack.key(c.record.name);
    stack.begin_array();
    if (c.stack) {
      for (const std::string& line : codes_.format_once(c.stack, package_dir_))
        stack.value_string(line);
    }
    stack.end_array();
  }
  stack.end_object();
  json_buffer_ = stack.take();
  write_file_atomic(dir + "/stack.json", json_buffer_);
  written.push_back(dir + "/stack.json");

  JsonWriter construct(1, std::move(json_buffer_));
  construct.begin_object();
  // At L1 the overflow guard keeps a module stack of the started model: it names the parents too.
  if (config_.level != Level::L1 || (watch_ && !models_.empty())) {
    // A module's backward record has, as msprobe writes it, the backward of the module call that
    // enclosed its forward; API backward records have none.
    std::unordered_map<std::string, const std::string*> forward_parents;
    for (const StoredCall& c : calls_) {
      const std::string& name = c.record.name;
      std::optional<std::string> parent = c.parent;
      if (!parent && name.rfind("Module.", 0) == 0 && is_backward_name(name)) {
        auto it = forward_parents.find(forward_name_of(name));
        if (it != forward_parents.end() && it->second) parent = backward_name_of(*it->second);
      }
      if (!is_backward_name(name)) forward_parents[name] = c.parent ? &*c.parent : nullptr;
      construct.key(name);
      if (parent) {
        construct.value_string(*parent);
      } else {
        construct.value_null();
      }
    }
  }
  construct.end_object();
  json_buffer_ = construct.take();
  write_file_atomic(dir + "/construct.json", json_buffer_);
  written.push_back(dir + "/construct.json");
  if (watch_) write_overflow_files(dir, written);
  json_buffer_ = dump_json(head, records, std::move(json_buffer_));
  write_file_atomic(dir + "/dump.json", json_buffer_);
}

}  // namespace msprobe
