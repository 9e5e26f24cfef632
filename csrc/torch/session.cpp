#include "torch/session.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "core/dump_writer.h"
#include "core/json_writer.h"
#include "core/output_files.h"
#include "torch/hook_scope.h"

namespace msprobe {

namespace {

std::shared_ptr<Session> g_session;  // accessed with std::atomic_load/store

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
  options_.md5 =
      config_.task == Task::Statistics && config_.statistics.summary_mode == SummaryMode::Md5;
  if (config_.task != Task::Statistics) saver_ = std::make_unique<TensorSaver>();
  if (config_.task == Task::OverflowCheck) watch_ = std::make_unique<OverflowWatch>(config_);
  std::error_code ec;
  const auto abs = std::filesystem::absolute(config_.dump_path, ec);
  dump_root_ = ec ? config_.dump_path : abs.lexically_normal().string();
  while (dump_root_.size() > 1 && dump_root_.back() == '/') dump_root_.pop_back();
  check_writable(dump_root_, source);
}

Session::~Session() {
  collecting_ = false;
}

bool Session::finished() const {
  if (ended_ || (watch_ && watch_->exhausted())) return true;
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
  open_module_calls().clear();
  rank_ = rank;
  if (saver_) options_.tensor_dir = step_dir() + "/dump_tensor_data";
  if (config_.task == Task::Tensor) options_.saver = saver_.get();
  const bool rank_ok =
      rank < 0 ? config_.rank.all() || config_.rank.contains(0) : config_.rank.contains(rank);
  collecting_ = rank_ok && config_.step.contains(step_) && !finished();
}

void Session::pause() {
  collecting_ = false;
}

void Session::stop() {
  collecting_ = false;
  if (dirty_) write_step_or_report();
}

void Session::step() {
  collecting_ = false;
  if (dirty_) write_step_or_report();
  clear_step();
  selection_.new_step();
  if (watch_) watch_->new_step();
  ++step_;
}

int64_t Session::next_index(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_[key]++;
}

std::optional<OverflowStop> Session::add(StoredCall&& call, const LiveTensors* live) {
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<OverflowStop> stop;
  if (watch_) {
    static const LiveTensors kNone;
    const LiveTensors& tensors = live ? *live : kNone;
    const Verdict v = watch_->judge(call.record, tensors);
    if (v.finding) keep_tensors(call, tensors);
    if (v.stop) stop = describe_stop(call, *v.finding, tensors);
    // overflow_nums reached: the rest of the run is not collected.
    if (watch_->exhausted()) collecting_ = false;
  }
  calls_.push_back(std::move(call));
  dirty_ = true;
  return stop;
}

void Session::end_with_overflow() {
  collecting_ = false;
  ended_ = true;
  if (dirty_) write_step_or_report();
}

void Session::write_step_or_report() {
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
  }
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
  if (watch_ && !watch_->step_flagged()) {
    dirty_ = false;
    return;
  }
  records.reserve(calls_.size());
  for (const StoredCall& c : calls_) records.push_back(&c.record);

  const std::string dir = step_dir();
  make_dirs(dir);
  DumpHead head{to_string(config_.task), to_string(config_.level), std::nullopt};
  if (saver_) {
    head.dump_data_dir = options_.tensor_dir;
    for (StoredCall& c : calls_) {
      for (auto& [tensor, name] : c.tensors) saver_->save(tensor, options_.tensor_dir + "/" + name);
      c.tensors.clear();
    }
    const std::string error = saver_->flush();
    if (!error.empty() && !reported_write_error_) {
      // Training goes on: a full disk must not kill the run being observed.
      std::fprintf(stderr, "msprobe_cpp: saving tensors failed, the dump is incomplete: %s\n",
                   error.c_str());
      reported_write_error_ = true;
    }
  }
  write_file_atomic(dir + "/dump.json", dump_json(head, records));

  JsonWriter stack(1);
  stack.begin_object();
  for (const StoredCall& c : calls_) {
    stack.key(c.record.name);
    stack.begin_array();
    if (c.stack) {
      for (const std::string& line : codes_.format(*c.stack, package_dir_))
        stack.value_string(line);
    }
    stack.end_array();
  }
  stack.end_object();
  write_file_atomic(dir + "/stack.json", stack.take());

  JsonWriter construct(1);
  construct.begin_object();
  if (config_.level != Level::L1) {
    for (const StoredCall& c : calls_) {
      construct.key(c.record.name);
      if (c.parent) {
        construct.value_string(*c.parent);
      } else {
        construct.value_null();
      }
    }
  }
  construct.end_object();
  write_file_atomic(dir + "/construct.json", construct.take());
  if (watch_) write_overflow_files(dir);
  dirty_ = false;
}

}  // namespace msprobe
