#include "live/session/session.h"

#include <pybind11/pybind11.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "live/capture/flagged_evidence.h"
#include "live/hooks/hook_scope.h"
#include "live/log/tool_log.h"
#include "live/overflow/python_objects.h"
#include "live/session/headroom_sites.h"

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
  return SessionPaths{std::move(package_dir), std::move(library_dir), std::move(root)};
}

std::string section_name(const Config& c, const std::string& source) {
  return source + ": " + (c.task == Task::Tensor ? "tensor" : "statistics");
}

}  // namespace

Session::Session(Config config, std::string package_dir, const std::string& source,
                 std::string library_dir)
    : config_(std::move(config)),
      paths_(session_paths(config_, std::move(package_dir), std::move(library_dir), source)),
      numbering_(state_, ++g_epochs),
      selection_(config_.collect(), config_.level, section_name(config_, source)),
      capture_(config_, paths_.dump_root),
      deferred_(config_.overflow_check, capture_.pending()),
      guard_(config_, paths_, state_, codes_),
      writer_(config_.dump_path, paths_.dump_root, to_string(config_.task),
              to_string(config_.level), capture_.saver()) {
  if (!config_.watching()) return;
  state_.with_lock([&](StepState& s) {
    try {
      s.watch = std::make_unique<OverflowWatch>(config_, s.models);
    } catch (const RulesError& e) {
      // A rules file the config names is part of the config: its error names both.
      throw ConfigError(source + ": overflow_check.rules: " + e.what());
    }
    s.decisions = std::make_unique<OverflowDecisions>(config_.overflow_check);
    if (config_.overflow_check.headroom > 0) {
      s.headroom = std::make_unique<Headroom>(config_.overflow_check.headroom);
    }
  });
}

Session::~Session() {
  gate_.close();
}

int64_t Session::current_step() const {
  return state_.with_lock([](const StepState& s) { return s.step; });
}

void Session::start(int rank) {
  deliver_said_lines();  // an earlier step's write thread's
  // A forward that an exception cut short (an overflow stop, a user's error) left its module
  // calls open on this thread.
  clear_module_calls();
  if (said_.first(" stale temporaries")) clean_earlier_run(rank);
  const auto [step, staging] = state_.with_lock([&](StepState& s) {
    s.ended_by_raise = false;
    if (!s.began) {
      s.began = true;
      if (s.watch) s.models.new_step();  // what "written before this step began" compares with
    }
    s.rank = rank;
    return std::make_pair(s.step, staging_of(s));
  });
  // Task tensor saves as the calls happen: into the folder being built.
  if (capture_.saver()) capture_.file_names().set_dir(staging + "/dump_tensor_data");
  const bool rank_ok =
      rank < 0 ? config_.rank.all() || config_.rank.contains(0) : config_.rank.contains(rank);
  const bool collect = rank_ok && config_.step.contains(step) && !past_last_step(config_, step);
  if (collect) state_.with_lock([](StepState& s) { s.collected = true; });
  gate_.open(collect);
}

void Session::warn_unmatched_selection(int64_t step) {
  if (!selection_.filters()) return;
  const std::string section = config_.task == Task::Tensor ? "tensor" : "statistics";
  for (const std::string& entry : selection_.unmatched()) {
    if (!said_.first("unmatched " + entry)) continue;
    say_warning(section + "." + entry + " matched no call in step " + std::to_string(step) +
                " (names look like \"Functional.relu.0.forward\" or "
                "\"Module.fc1.Linear.forward.0\"; an unfiltered run's dump.json lists them)");
  }
}

void Session::stop() {
  deliver_said_lines();  // an earlier step's write thread's, before this step's
  gate_.close();
  write_step(/*at_stop=*/true, /*hand_over=*/config_.async_dump);
}

void Session::drain_writes() {
  {
    pybind11::gil_scoped_release no_gil;
    writer_.drain();
  }
  deliver_said_lines();  // the write thread's
}

void Session::step() {
  deliver_said_lines();  // an earlier step's write thread's, before this step's
  gate_.close();
  const auto [raised, collected, step] = state_.with_lock([](StepState& s) {
    const bool raised = std::exchange(s.ended_by_raise, false);
    return std::make_tuple(raised, s.collected, s.step);
  });
  if (raised) return;  // the raise already ended this step
  write_step(/*at_stop=*/false, /*hand_over=*/config_.async_dump);
  if (collected) warn_unmatched_selection(step);
  advance();
}

std::string Session::end_step_for_raise() {
  gate_.close();
  const std::string write_error = write_step();
  advance();
  state_.with_lock([](StepState& s) { s.ended_by_raise = true; });
  return write_error;
}

void Session::advance() {
  capture_.new_step();
  selection_.new_step();
  backward_scope_.clear();
  state_.with_lock([this](StepState& s) {
    s.calls.clear();
    s.counters.clear();
    s.dirty = false;
    s.collected = false;
    s.began = false;
    s.staging.clear();
    s.published = false;
    s.peer_stop.reset();
    if (s.watch) s.watch->new_step();
    if (s.decisions) s.decisions->new_step();
    ++s.step;
    // Under the lock: add() compares a call's epoch with it.
    numbering_.set_epoch(++g_epochs);
  });
}

std::optional<OverflowEvent> Session::add(StoredCall&& call, const LiveTensors* live) {
  static const LiveTensors kNone;
  const LiveTensors& tensors = live ? *live : kNone;
  CallDecision d;
  KeptTensors keep;
  // What the work after the lock needs of the call, taken only where there is such work.
  std::string name;
  StackPtr stack;
  int rank = -1;
  bool dropped = false;
  std::optional<HeadroomRecord> crossed;  // a 16-bit call site that just reached the headroom
  std::optional<std::string> parent;
  state_.with_lock([&](StepState& s) {
    if (call.epoch != 0 && call.epoch != numbering_.epoch()) {
      dropped = true;
      return;
    }
    if (s.headroom) {
      crossed = observe_headroom(*s.headroom, call, s.step);
      if (crossed) {
        name = call.record.name;
        stack = call.stack;
        parent = call.parent;
        rank = s.rank;
      }
    }
    if (s.watch) {
      const Verdict v = s.watch->judge(call.record, tensors, call.peer_rank);
      d = s.decisions->on_call(v, is_backward_name(call.record.name),
                               [&] { return guard_.facts_of(s, call, v); });
      if (d.keep_tensors)
        keep.names = FlaggedEvidence(capture_.file_names()).claim(call.record, tensors);
      if (d.wants_source || !keep.names.empty()) name = call.record.name;
      if (d.wants_source) stack = call.stack;
      rank = s.rank;
    }
    keep.index = s.calls.size();
    keep.epoch = numbering_.epoch();
    s.calls.push_back(std::move(call));
    s.dirty = true;
  });
  if (dropped) return std::nullopt;
  if (crossed) guard_.say_headroom(*crossed, headroom_site(name, stack), parent, stack, rank);
  if (!keep.names.empty()) keep_tensors(keep, name, tensors);
  // The source line needs the GIL, which must never be waited for while holding the step's lock:
  // a thread holding the GIL may be waiting for it (backward recorders run without the GIL).
  if (d.wants_source) guard_.tell_source(stack, name, d.event ? &*d.event : nullptr);
  if (d.tell_absorbed) {
    const std::string line =
        state_.with_lock([](const StepState& s) { return s.decisions->absorbed_line(); });
    const std::string who = rank >= 0 ? "[rank " + std::to_string(rank) + "] " : "";
    if (!line.empty()) say(LogLevel::Info, who + line);
  }
  return std::move(d.event);
}

void Session::keep_tensors(const KeptTensors& keep, const std::string& call,
                           const LiveTensors& live) {
  std::vector<std::pair<at::Tensor, std::string>> copies =
      FlaggedEvidence::copies(keep.names, live);
  state_.with_lock([&](StepState& s) {
    // The step may have been written and ended meanwhile (another thread's step()): then its
    // files are out, and the copies are dropped.
    if (numbering_.epoch() != keep.epoch || keep.index >= s.calls.size()) return;
    StoredCall& stored = s.calls[keep.index];
    if (stored.record.name == call) stored.tensors = std::move(copies);
  });
}

}  // namespace msprobe
