// One debugging session: the validated config, the step and rank gates, and the wiring of the
// parts a call goes through (capture, the overflow guard, the step's state, the writer). Hooks
// find the current session through current_session(); a new PrecisionDebugger replaces it.
//
// Threading: the lifecycle (start, stop, step, pause) and everything marked "GIL required" run on
// a Python thread with the GIL. Hooks run there too, or on the autograd engine's threads without
// the GIL (backward records). The step's state is reached only under its lock (Guarded), which is
// never held while waiting for the GIL or a device: device syncs, clones and stack formatting come
// before or after it, and files are written with neither the lock nor the GIL held. The other
// parts guard themselves (Selection, TensorCapture's parts, StepWriter) or are atomics.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "core/config.h"
#include "core/guarded.h"
#include "core/overflow_decisions.h"
#include "core/report.h"
#include "core/selection.h"
#include "live/capture/call_stack.h"
#include "live/capture/flagged_evidence.h"
#include "live/capture/live_tensors.h"
#include "live/capture/tensor_capture.h"
#include "live/session/backward_scope.h"
#include "live/session/collection_gate.h"
#include "live/session/deferred_calls.h"
#include "live/session/step_state.h"
#include "live/session/step_writer.h"
#include "live/stats/device_stats.h"

namespace msprobe {

struct PythonSide;

// Messages said once per session. Thread-safe.
class SaidOnce {
 public:
  bool first(const std::string& what) {  // true the first time `what` is asked about
    std::lock_guard<std::mutex> lock(mu_);
    return said_.insert(what).second;
  }

 private:
  std::mutex mu_;
  std::set<std::string> said_;
};

struct SessionPaths {
  std::string package_dir, library_dir;  // frames under these are ours, not the user's
  std::string dump_root;                 // dump_path, absolute, without a trailing '/'
};

class Session {
 public:
  // `package_dir`: frames under it are left out of stack.json. `source` names the config in
  // errors about it (ConfigError).
  Session(Config config, std::string package_dir, const std::string& source,
          std::string library_dir = "");
  ~Session();

  const Config& config() const { return config_; }
  bool apis_hooked() const { return config_.level != Level::L0; }
  bool modules_hooked() const { return config_.level != Level::L1; }

  // Lifecycle, called from Python with the GIL held.
  void start(int rank);   // rank -1: torch.distributed not initialized
  void stop();            // writes the step's files (everything collected in this step so far)
  void drain_writes();    // async_dump: returns once every step handed over is written
  void step();            // writes if stop() was not called, then moves to the next step
  bool finished() const;  // past the last configured step
  int64_t current_step() const;

  // Hot path.
  // Whether the hooks record now (pause() and module_dump() turn it too).
  CollectionGate& gate() { return gate_; }
  int64_t next_index(const std::string& key);  // n of `key` within the step
  // Unique among all sessions' steps: API hooks reset their own call counters when it changes.
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  // Stores a call; with task overflow_check judges it first (`live`: its tensors) and says what
  // the hook must do about it.
  std::optional<OverflowEvent> add(StoredCall&& call, const LiveTensors* live = nullptr);
  // What a started model returned (task overflow_check), judged and not stored: msprobe records
  // no started model. Its facts name `call`; its source line is the model's caller.
  std::optional<OverflowEvent> judge_model_output(StoredCall&& call, const LiveTensors& live);
  bool watching() const { return config_.task == Task::OverflowCheck; }
  StackPtr capture_stack() { return codes_.capture(); }  // GIL required
  Selection& selection() { return selection_; }
  BackwardScope& backward_scope() { return backward_scope_; }  // autograd threads
  const EntryOptions& entry_options() const { return capture_.options(); }
  const StatsCache& stats_cache() const { return capture_.stats_cache(); }

  // Task overflow_check. GIL required for all of these.
  void set_python_side(std::unique_ptr<PythonSide> side);
  // An op origin's replays (facts.replay, not_replayed), kept for the step's report.
  void set_replay(const OverflowFacts& facts);
  // The 16-bit call sites said to near their dtype's range (debugger.headroom).
  std::vector<HeadroomRecord> headroom_warned() const;
  PythonSide* python_side() const { return py_.get(); }
  // A parameter (or buffer, `buffer`) of a model given to start(), named `name`.
  void add_model_tensor(const std::string& name, const at::Tensor& t, bool buffer);
  // A tensor that came out of a torch.compile'd model: NaN/inf in it was made where no call is
  // recorded.
  void mark_compiled_output(const at::Tensor& t);
  // The hooks raise at the origin; this writes the step and ends it first, so the next start()
  // begins the next step (and a step() in the user's handler does not skip a number).
  // Returns why the step's files could not be written, or "" when they were (or none were due).
  std::string end_step_for_raise();
  // Called by the autograd engine when a backward pass with a backward op anomaly ends.
  std::optional<OverflowEvent> end_of_backward();
  // Before an optimizer (named by its class) writes the gradients: `bad` names those that hold
  // NaN/inf. `reduced`: under torch.distributed, where they were averaged across the ranks.
  std::optional<OverflowEvent> judge_optimizer_gradients(const std::string& optimizer,
                                                         std::vector<std::string> bad,
                                                         bool reduced);
  void set_loss_scaled();
  // At step(), for a step whose loss a scaler scaled: `before` at start() (or scale()), `after`
  // now. A stop to raise, or nothing.
  std::optional<OverflowEvent> judge_loss_scale(double before, double after);

  // Batched sync (overflow_check.sync): the queue of calls waiting for their statistics.
  DeferredCalls& deferred() { return deferred_; }
  // Reads every queued call's device statistics back at once, then stores and judges the calls
  // in the order they were made, as add() would have one by one. Returns what the hooks must do;
  // a raise carries how many calls ran after its call.
  std::vector<OverflowEvent> resolve_deferred();
  // Times this session's statistics waited for a device: the process's count since the session
  // began (the statistics code does not know its session; one session is live at a time).
  int64_t host_syncs() const { return msprobe::host_syncs() - host_syncs_at_start_; }

  // torch.distributed: another rank stopped. Set from the watcher thread; the hooks read it.
  void set_peer_stopped() { peer_stopped_.store(true, std::memory_order_release); }
  bool peer_stopped() const { return peer_stopped_.load(std::memory_order_acquire); }
  // Writes this rank's records of the current step as a flagged step whose report names the
  // peer, and ends the step. Returns the folder written ("" if nothing could be). GIL required.
  std::string stop_for_peer(const PeerOverflow& peer);
  // True the first time `what` is asked about in this session: warnings said once.
  bool warn_once(const std::string& what) { return said_.first(what); }
  // True the first time only: the tool's own statistics failures are said once per session.
  bool first_statistics_failure() { return said_.first(" statistics failure"); }

 private:
  void advance();
  // The temporaries and unfinished folders a killed run of rank `rank` left (the first start()).
  void clean_earlier_run(int rank);
  void warn_unmatched_selection(int64_t step);  // once per entry and session
  // Writes the step if anything was collected since the last write ("" or why it could not be).
  // `at_stop`: a scaled step waits for step(), when the loss scaler has said whether it skipped.
  // hand_over: under async_dump, the write thread writes the files and this returns at once.
  std::string write_step(bool at_stop = false, bool hand_over = false);
  void take_back_calls(FinishedStep& done);
  std::string dir_of(const StepState& s) const { return paths_.dump_root + "/" + s.folder(); }
  const std::string& staging_of(StepState& s) const;
  OverflowFacts facts_of(const StepState& s, const StoredCall& call, const Verdict& v) const;
  // Task overflow_check: a flagged call's evidence (flagged_evidence.h), attached after the lock
  // to the stored call, the `index`-th of the step whose epoch is `epoch`.
  struct KeptTensors {
    EvidenceNames names;
    size_t index = 0;
    uint64_t epoch = 0;
  };
  void keep_tensors(const KeptTensors& keep, const std::string& call, const LiveTensors& live);
  void tell_source(const StackPtr& stack, const std::string& call, OverflowEvent* event);
  void say_headroom(const HeadroomRecord& r, const HeadroomSite& site,
                    const std::optional<std::string>& parent, const StackPtr& stack, int rank);

  const Config config_;
  const SessionPaths paths_;
  CollectionGate gate_;
  std::atomic<uint64_t> epoch_;
  Guarded<StepState> state_;
  CodeRegistry codes_;  // GIL
  Selection selection_;
  TensorCapture capture_;
  DeferredCalls deferred_;          // after capture_: it reads capture_'s pending statistics
  std::unique_ptr<PythonSide> py_;  // GIL
  StepWriter writer_;
  SaidOnce said_;
  BackwardScope backward_scope_;
  std::atomic<bool> peer_stopped_{false};
  const int64_t host_syncs_at_start_ = msprobe::host_syncs();
};

std::shared_ptr<Session> current_session();
void set_current_session(std::shared_ptr<Session> s);

}  // namespace msprobe
