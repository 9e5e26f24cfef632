// What a session leaves on disk: a step's files written (at once or on the write thread), built
// in a folder of their own and published whole (core/step_folders.h), and what a killed run left
// removed at the first start().
#include <pybind11/pybind11.h>

#include <filesystem>

#include "core/output_files.h"
#include "core/step_folders.h"
#include "live/crossing/python_crossing.h"
#include "live/log/tool_log.h"
#include "live/session/session.h"

namespace msprobe {

void Session::clean_earlier_run(int rank) {
  // What a run killed mid-write left in this rank's folders (other ranks may be writing theirs).
  const std::string rank_dir = paths_.rank_folder_of(rank);
  std::error_code ec;
  size_t earlier_steps = 0;
  for (const auto& step : std::filesystem::directory_iterator(paths_.dump_root, ec)) {
    if (step.is_directory(ec) && !step.is_symlink(ec)) {
      remove_stale_temporaries((step.path() / rank_dir).string());
      const std::string name = step.path().filename().string();
      if (name.rfind("step", 0) == 0 && name.size() > 4 &&
          std::filesystem::is_directory(step.path() / rank_dir, ec)) {
        ++earlier_steps;
      }
    }
  }
  if (earlier_steps > 0) {
    // Told once, at the first start(): a reader of the folder would take them for this run's.
    say_warning(paths_.dump_root + " holds " + std::to_string(earlier_steps) + " step folder" +
                (earlier_steps == 1 ? "" : "s") + " of an earlier run (" + rank_dir +
                "): a step this run writes replaces its folder there, the others stay");
  }
  // Nothing of this session is being built yet: each such folder of this rank is a killed
  // run's step that never became whole.
  const size_t unfinished = remove_unfinished_folders(paths_.dump_root, rank_dir);
  if (unfinished > 0) {
    say_warning("removed " + std::to_string(unfinished) + " unfinished step folder" +
                (unfinished == 1 ? "" : "s") + " of an earlier run under " + paths_.dump_root);
  }
}

const std::string& Session::staging_of(StepCalls& s) const {
  std::string folder = paths_.folder_of(numbering_.ticket());
  if (s.staging.empty() || s.staging_for != folder) {
    s.staging = staging_folder(paths_.dump_root, folder);
    s.staging_for = std::move(folder);
  }
  return s.staging;
}

FinishedStep Session::take_step_calls(StepCalls& s, GuardStepEnd&& guarded) const {
  FinishedStep f;
  const StepTicket at = numbering_.ticket();  // published under the step's lock, held here
  f.step = at.step;
  f.rank = at.rank;
  f.dir = paths_.dir_of(at);
  f.folder = paths_.folder_of(at);
  // A later write of the step is built anew: this one's folder is renamed into place.
  f.staging = staging_of(s);
  s.staging.clear();
  f.again = s.published;
  f.calls = std::move(s.calls);
  s.calls.clear();
  // The next step makes about as many calls: its records then go to one block, not to one
  // that grows by doubling, moving every record made so far each time.
  s.calls.reserve(f.calls.size());
  // At L1 the overflow guard keeps a module stack of the started model: it names the parents.
  f.construct = config_.level != Level::L1 || guarded.models_started;
  f.report = std::move(guarded.report);
  f.judgements = std::move(guarded.judgements);
  return f;
}

std::string Session::write_step(WriteAt at, bool hand_over, const OverflowFacts* stop) {
  if (config_.async_dump) {
    // A write of this step still in progress gives its calls back before new ones join them.
    const bool flagged = guard_.flagged_unstored();
    const int64_t now =
        state_.with_lock([&](StepCalls& s) { return s.dirty || flagged ? current_step() : -1; });
    PythonCrossing::NoGil no_gil;
    if (now >= 0) writer_.drain_step(now);
  }
  // Under the lock: whether the step is due, and its calls taken out with what the files need.
  // The guard's lock is taken inside the step's (the one order of the two).
  std::vector<std::string> said;
  std::optional<FinishedStep> done = state_.with_lock([&](StepCalls& s) {
    std::optional<FinishedStep> f;
    GuardStepEnd guarded = guard_.end_step(s.dirty, at == WriteAt::Stop, s.peer_stop, stop);
    said = std::move(guarded.said);
    if (guarded.closed) s.dirty = false;
    if (!guarded.write) return f;
    f.emplace(take_step_calls(s, std::move(guarded)));
    return f;
  });
  for (std::string& line : said) msprobe::say(LogLevel::Info, std::move(line));
  if (!done) return "";
  // With the GIL: the stack lines (formatted once per distinct stack).
  done->stacks.reserve(done->calls.size());
  for (const StoredCall& c : done->calls) {
    done->stacks.push_back(c.stack && !is_backward_name(c.record.name)
                               ? codes_.format_once(c.stack, paths_.package_dir)
                               : StackLines());
  }
  if (hand_over) {
    // The write thread needs neither the GIL nor the state lock until it gives the calls back.
    PythonCrossing::NoGil no_gil;
    writer_.write_later(std::make_shared<FinishedStep>(std::move(*done)),
                        [this](FinishedStep& f) { take_back_calls(f); });
    return "";
  }
  std::string error;
  {
    PythonCrossing::NoGil no_gil;
    // A stop's step is written by the write thread, so that the stopping thread goes one way
    // (docs/architecture.md, "The walk of one stop"); a step that goes on is written here: the
    // hand-over costs a step more than the write (bench/README.md, issue 54).
    error = at == WriteAt::Raise ? writer_.write_and_wait(*done) : writer_.write(*done);
    // A write that ends the step gives nothing back: advance() would let it go at once.
    if (at != WriteAt::Raise) take_back_calls(*done);
  }
  deliver_said_lines();  // the writer's, with the GIL back
  return error;
}

// A later stop() in the same step writes the calls again, with those made since.
void Session::take_back_calls(FinishedStep& done) {
  state_.with_lock([&](StepCalls& s) {
    if (current_step() != done.step) return;
    s.published = s.published || done.published;
    for (StoredCall& c : s.calls) done.calls.push_back(std::move(c));
    s.calls = std::move(done.calls);
  });
}

// A peer rank stopped: this rank's records of the step are written as a flagged step whose report
// names the peer, and the step ends.
std::string Session::stop_for_peer(const PeerOverflow& peer) {
  PythonCrossing::assert_gil();
  if (!config_.watching()) return "";
  const std::string dir = state_.with_lock([&](StepCalls& s) {
    s.peer_stop = peer;
    s.dirty = true;  // written even when this rank collected nothing yet
    return paths_.dir_of(numbering_.ticket());
  });
  end_step_for_raise();
  std::error_code ec;
  return std::filesystem::exists(dir + "/dump.json", ec) ? dir : "";
}

}  // namespace msprobe
