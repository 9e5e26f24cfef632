#include "live/session/session.h"

#include <pybind11/pybind11.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/risk_levels.h"
#include "core/step_rank_gate.h"
#include "live/capture/flagged_evidence.h"
#include "live/crossing/python_crossing.h"
#include "live/hooks/hook_scope.h"
#include "live/log/tool_log.h"
#include "live/overflow/python_objects.h"
#include "live/session/overflow_guard.h"

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
  } else {
    // access() says yes to root everywhere, /proc and read-only mounts included: a folder made
    // and removed at once is the answer (issue 44: /proc/dump failed only at the first stop).
    const fs::path probe = p / (".msprobe_cpp-probe-" + std::to_string(getpid()));
    const bool made = fs::create_directory(probe, ec);
    if (ec) {
      reason = "a folder cannot be made in \"" + p.string() + "\" (" + ec.message() + ")";
    } else if (made) {
      fs::remove(probe, ec);
    }
  }
  if (!reason.empty()) {
    throw ConfigError(source + ": dump_path: cannot write dumps under \"" + path + "\": " + reason);
  }
}

// torchrun's restarts run the same steps again in the same dump_path: attempt N > 0 of an
// elastic run writes under <dump_path>/attempt<N>/, so that it never replaces the evidence of the
// attempt that failed (docs/debugger.md, "Large-scale training"). Attempt 0, and a run outside
// torchrun, keep msprobe's layout.
std::string attempt_folder() {
  const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
  if (!restarts || !*restarts) return "";
  char* end = nullptr;
  const long n = std::strtol(restarts, &end, 10);
  return (*end == '\0' && n > 0) ? "/attempt" + std::to_string(n) : "";
}

SessionPaths session_paths(const Config& config, std::string package_dir, std::string library_dir,
                           const std::string& source) {
  std::error_code ec;
  const auto abs = std::filesystem::absolute(config.dump_path, ec);
  std::string root = ec ? config.dump_path : abs.lexically_normal().string();
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  root += attempt_folder();
  check_writable(root, source);
  return SessionPaths{std::move(package_dir), std::move(library_dir), std::move(root),
                      DumpFormat::of(config).unranked_folder()};
}

// The section scope and list come from: the task's own (tensor, structure, free_benchmark), or
// statistics (statistics, overflow_check).
Task selecting_task(const Config& c) {
  const bool own = c.task == Task::Tensor || c.task == Task::Structure ||
                   c.task == Task::FreeBenchmark;
  return own ? c.task : Task::Statistics;
}

// free_benchmark's scope and list are exact names and parts of names, checked at L1.
CollectSection selecting_section(const Config& c) {
  if (c.task != Task::FreeBenchmark) return c.collect();
  CollectSection s;
  s.scope = c.free_benchmark.scope;
  s.list = c.free_benchmark.list;
  return s;
}

}  // namespace

Session::Session(Config config, std::string package_dir, const std::string& source,
                 std::string library_dir, std::optional<ConfigWatch> dump_enable)
    : config_(std::move(config)),
      paths_(session_paths(config_, std::move(package_dir), std::move(library_dir), source)),
      numbering_(StepTicket{0, -1, ++g_epochs}),
      selection_(selecting_section(config_), config_.level,
                 source + ": " + to_string(selecting_task(config_)), effective_risk_level(config_),
                 config_.task == Task::Structure,
                 config_.task == Task::FreeBenchmark ? ScopeForm::Names : ScopeForm::Window,
                 &numbering_.tickets()),
      capture_(config_, paths_.dump_root, &numbering_.tickets()),
      deferred_(config_.overflow_check, capture_.pending()),
      guard_(config_, paths_, codes_, source, numbering_.tickets()),
      writer_(config_.dump_path, paths_.dump_root, to_string(config_.task),
              to_string(config_.level), DumpFormat::of(config_), capture_.saver()),
      backward_scope_(&numbering_.tickets()) {
  state_.with_lock([&](StepCalls& s) { s.dump_enable = std::move(dump_enable); });
}

Session::~Session() {
  gate_.close();
}

int64_t Session::current_step() const {
  return numbering_.ticket().step;
}

bool Session::began_step() const {
  return state_.with_lock([](const StepCalls& s) { return s.began; });
}

int Session::current_rank() const {
  return numbering_.ticket().rank;
}

bool Session::start(int rank, bool new_models, const ScheduledTokens& tokens) {
  poll_dump_enable();
  deliver_said_lines();  // an earlier step's write thread's
  // A forward that an exception cut short (an overflow stop, a user's error) left its module
  // calls open on this thread.
  clear_module_calls();
  if (said_.first(" stale temporaries")) clean_earlier_run(rank);
  const auto [step, staging, first, restarted] = state_.with_lock([&](StepCalls& s) {
    s.ended_by_raise = false;
    const bool restarted = s.began && s.stopped && !new_models;
    const bool first = !std::exchange(s.began, true);
    s.stopped = false;
    s.ever_started = true;
    StepTicket ticket = numbering_.ticket();
    ticket.rank = rank;  // the same step, its rank now known
    numbering_.publish(ticket);
    return std::make_tuple(ticket.step, staging_of(s), first, restarted);
  });
  if (restarted && said_.first("restart")) {
    say_warning("start() again without step(): the calls go on counting in step " +
                std::to_string(step) + "; call debugger.step() at the end of each iteration");
  }
  guard_.begin_step(first);
  // Task tensor saves as the calls happen: into the folder being built.
  if (capture_.saver()) capture_.file_names().set_dir(staging + "/" + kTensorFolder);
  const StepRankGate steps_ranks = StepRankGate::of(config_);
  const bool collect = state_.with_lock([&](StepCalls& s) {
    const bool on = steps_ranks.admits(step, rank) && (!s.dump_enable || s.dump_enable->enabled());
    if (on) s.collected = true;
    return on;
  });
  gate_.open(collect);
  take_scheduled_tokens(tokens);
  return first;
}

void Session::poll_dump_enable() {
  const double now = std::chrono::duration<double>(
                         std::chrono::steady_clock::now().time_since_epoch())
                         .count();
  std::string said;
  const bool turned_off = state_.with_lock([&](StepCalls& s) {
    if (!s.dump_enable) return false;
    const bool was = s.dump_enable->enabled();
    said = s.dump_enable->poll(now);
    return was && !s.dump_enable->enabled() && s.began && !s.stopped;
  });
  if (!said.empty()) say_warning(said);
  // 26.x writes what the step collected so far when the dump turns off.
  if (turned_off) stop();
}

void Session::take_scheduled_tokens(const ScheduledTokens& tokens) {
  capture_.slices().clear_request();
  const std::optional<std::string>& id = config_.collect().msprobe26.request_id;
  if (!id || !tokens || tokens->empty()) return;
  int64_t total = 0, begin = 0, end = 0;
  bool found = false;
  for (const auto& [request, count] : *tokens) {
    if (request == *id) {
      found = true;
      begin = total;
      end = total + count;
    }
    total += count;
  }
  if (!found) {
    say_warning(*id + " not found in scheduled_tokens, step " + std::to_string(current_step()) +
                " will not be dumped");
    gate_.open(false);
    return;
  }
  if (begin < end) capture_.slices().set_request(begin, end, total);
}

bool Session::judges_optimizer() const {
  return state_.with_lock([](const StepCalls& s) { return s.began && s.collected; });
}

void Session::warn_unmatched_selection(int64_t step) {
  if (!selection_.filters()) return;
  const std::string section = to_string(selecting_task(config_));
  for (const std::string& entry : selection_.unmatched()) {
    if (!said_.first("unmatched " + entry)) continue;
    say_warning(section + "." + entry + " matched no call in step " + std::to_string(step) +
                " (names look like \"Functional.relu.0.forward\" or "
                "\"Module.fc1.Linear.forward.0\"; an unfiltered run's dump.json lists them)");
  }
}

void Session::stop() {
  deliver_said_lines();  // an earlier step's write thread's, before this step's
  state_.with_lock([](StepCalls& s) { s.stopped = true; });
  gate_.close();
  write_step(WriteAt::Stop, /*hand_over=*/config_.async_dump);
  poll_dump_enable();
}

void Session::drain_writes() {
  {
    PythonCrossing::NoGil no_gil;
    writer_.drain();
  }
  deliver_said_lines();  // the write thread's
}

void Session::stop_at_exit() {
  const bool due =
      state_.with_lock([](const StepCalls& s) { return s.ever_started && !s.stopped; });
  if (due) stop();
}

void Session::step() {
  deliver_said_lines();  // an earlier step's write thread's, before this step's
  gate_.close();
  const auto [raised, collected, step, started] = state_.with_lock([this](StepCalls& s) {
    const bool raised = std::exchange(s.ended_by_raise, false);
    return std::make_tuple(raised, s.collected, numbering_.ticket().step, s.ever_started);
  });
  // At level debug, save() begins the step, and start() is not needed (26.x's).
  if (!started && config_.level != Level::Debug && said_.first("step before start")) {
    say_warning("step() before any start(): step " + std::to_string(step) +
                " ends with nothing recorded, and the next start() begins step " +
                std::to_string(step + 1) + "; call start() at the beginning of each step");
  }
  if (raised) return;  // the raise already ended this step
  write_step(WriteAt::StepEnd, /*hand_over=*/config_.async_dump);
  if (collected) warn_unmatched_selection(step);
  advance();
  poll_dump_enable();
}

std::string Session::end_step_for_raise(const OverflowFacts* stop) {
  gate_.close();
  const std::string write_error = write_step(WriteAt::Raise, false, stop);
  advance(/*ended_by_raise=*/true);
  return write_error;
}

// The one place a step ends for every part: the next ticket is published, and each part clears
// what it kept of this step at its own next use (core/step_ticket.h), not here: a stop's end of
// the step takes the step's lock and the device statistics', no other.
void Session::advance(bool ended_by_raise) {
  capture_.end_step();
  state_.with_lock([this, ended_by_raise](StepCalls& s) {
    s.calls.clear();
    s.dirty = false;
    s.collected = false;
    s.began = false;
    s.stopped = false;
    s.staging.clear();
    s.published = false;
    s.peer_stop.reset();
    s.ended_by_raise = ended_by_raise;
    // Under the step's lock, its one publisher: add() reads the epoch under it.
    const StepTicket now = numbering_.ticket();
    numbering_.publish(StepTicket{now.step + 1, now.rank, ++g_epochs});
  });
}

std::optional<OverflowEvent> Session::add(StoredCall&& call, const LiveTensors* live) {
  static const LiveTensors kNone;
  const LiveTensors& tensors = live ? *live : kNone;
  CallVerdict v;
  if (config_.watching()) {
    v = guard_.judge_call(call, tensors);
    if (v.dropped) return std::nullopt;
  }
  if (v.keep_tensors) {
    // A flagged call's evidence (capture/flagged_evidence.h): its names claimed and its tensors
    // copied before the step's lock (a device copy is never made under it), stored with it.
    const EvidenceNames names = FlaggedEvidence(capture_.file_names()).claim(call.record, tensors);
    if (!names.empty()) call.tensors = FlaggedEvidence::copies(names, tensors);
  }
  const bool stored = state_.with_lock([&](StepCalls& s) {
    // A call numbered by a step that has ended since (another thread's step()) is not this one's.
    if (call.epoch != 0 && call.epoch != numbering_.epoch()) return false;
    s.calls.push_back(std::move(call));
    s.dirty = true;
    return true;
  });
  if (!stored) return std::nullopt;
  return std::move(v.event);
}

}  // namespace msprobe
