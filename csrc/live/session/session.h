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
#include "core/config_watch.h"
#include "core/guarded.h"
#include "core/overflow_decisions.h"
#include "core/report.h"
#include "core/selection.h"
#include "live/capture/call_stack.h"
#include "live/capture/live_tensors.h"
#include "live/capture/tensor_capture.h"
#include "live/session/backward_scope.h"
#include "live/session/call_checker.h"
#include "live/session/task_processor.h"
#include "live/session/call_numbering.h"
#include "live/session/collection_gate.h"
#include "live/session/deferred_calls.h"
#include "live/session/overflow_guard.h"
#include "live/session/step_state.h"
#include "live/session/step_writer.h"
#include "live/stats/device_stats.h"

namespace msprobe {

// torch.distributed: another rank stopped. Set from the peer-stop watcher thread, read first by
// every hook: one atomic (release/acquire), no lock.
class PeerStopFlag {
 public:
  void set() { stopped_.store(true, std::memory_order_release); }
  bool stopped() const { return stopped_.load(std::memory_order_acquire); }
  // The hooks raised it on this rank (raise_peer_stop): until then every hooked call raises it,
  // also once the watcher thread has ended the step (its evidence written, the gate closed).
  void mark_raised() { raised_.store(true, std::memory_order_release); }
  bool unraised() const { return stopped() && !raised_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> stopped_{false};
  std::atomic<bool> raised_{false};
};

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

// What a hook uses of its session besides add(), and nothing more: whether to record now, how a
// call is named and numbered, whether it is selected, what is captured of it, and its stack.
// Each part guards itself (or is the GIL's: codes).
struct HookContext {
  CollectionGate& gate;
  CallNumbering& numbering;
  Selection& selection;
  TensorCapture& capture;
  BackwardScope& backward_scope;  // autograd threads
  CodeRegistry& codes;            // GIL: codes.capture() is the calling thread's stack
  const DumpFormat format;        // what the files look like (the generation the config speaks)
  // The processor of a task with work of its own (task_processor.h; null for the recording
  // tasks), and its checker where it runs the API calls itself (free_benchmark). Set once, as
  // the session is made (install_task_processor).
  std::shared_ptr<TaskProcessor> processor = nullptr;
  CallChecker* call_checker = nullptr;
};

class Session {
 public:
  // `package_dir`: frames under it are left out of stack.json. `source` names the config in
  // errors about it (ConfigError).
  // `dump_enable`: msprobe 26.x's, config.json looked at again as the run goes on
  // (core/config_watch.h): at start() (before it), stop() and step() (after them).
  Session(Config config, std::string package_dir, const std::string& source,
          std::string library_dir = "", std::optional<ConfigWatch> dump_enable = std::nullopt);
  ~Session();

  const Config& config() const { return config_; }

  // Lifecycle, called from Python with the GIL held.
  // rank -1: torch.distributed not initialized. `new_models`: start() was given a model it did
  // not have. `tokens`: msprobe 26.x's start(scheduled_tokens=...), the batch's requests in
  // order with their token counts (nullopt: none given, or not a valid dict); where the config's
  // request_id is among them, the step describes its rows only, and where it is not, the step is
  // not dumped. Returns whether this is the step's first start().
  bool start(int rank, bool new_models, const ScheduledTokens& tokens = std::nullopt);
  void stop();          // writes the step's files (everything collected in this step so far)
  void stop_at_exit();  // the step started last, when stop() was not called for it
  void drain_writes();  // async_dump: returns once every step handed over is written
  void step();          // writes if stop() was not called, then moves to the next step
  int64_t current_step() const;
  bool began_step() const;  // start() was called in the current step
  // After start(): msprobe 26.x's start(scheduled_tokens=...), the batch's requests in order
  // with their token counts (nullopt: none given, or not a valid dict). Where the config's
  // request_id is among them, this step describes its rows only; where it is not, this step
  // is not dumped.
  int current_rank() const;  // -1: torch.distributed not initialized
  // A step started and collected on this rank: an optimizer's step in it is judged.
  bool judges_optimizer() const;

  // Hot path.
  // What a hook uses of the session besides add(): the gate, numbering, selection, capture.
  HookContext& hooks() { return hooks_; }
  // Stores a call; with task overflow_check judges it first (`live`: its tensors) and says what
  // the hook must do about it.
  std::optional<OverflowEvent> add(StoredCall&& call, const LiveTensors* live = nullptr);
  // Task overflow_check: what is judged besides the calls, and the crossing into Python.
  OverflowGuard& guard() { return guard_; }
  // Batched sync (overflow_check.sync): the queue of calls waiting for their statistics
  // (resolve_deferred() judges it).
  DeferredCalls& deferred() { return deferred_; }
  // The hooks raise at the origin; this writes the step and ends it first, so the next start()
  // begins the next step (and a step() in the user's handler does not skip a number).
  // Returns why the step's files could not be written, or "" when they were (or none were due).
  // `stop`: the facts of the stop being raised (completed since its decision), for the report.
  std::string end_step_for_raise(const OverflowFacts* stop = nullptr);

  PeerStopFlag& peer_stop() { return peer_stop_; }
  // Writes this rank's records of the current step as a flagged step whose report names the
  // peer, and ends the step. Returns the folder written ("" if nothing could be). GIL required.
  std::string stop_for_peer(const PeerOverflow& peer);
  // Warnings said once per session.
  SaidOnce& said() { return said_; }

 private:
  void advance(bool ended_by_raise = false);
  // dump_enable: a changed file turns the dump on or off; off, the step being collected is
  // written first.
  void poll_dump_enable();
  void take_scheduled_tokens(const ScheduledTokens& tokens);
  // The temporaries and unfinished folders a killed run of rank `rank` left (the first start()).
  void clean_earlier_run(int rank);
  void warn_unmatched_selection(int64_t step);  // once per entry and session
  // Writes the step if anything was collected since the last write ("" or why it could not be).
  // `at`: at stop(), a scaled step waits for step(), when the loss scaler has said whether it
  // skipped; a write that ends the step (a raise, a peer's stop) gives no calls back to it.
  // hand_over: under async_dump, the write thread writes the files and this returns at once.
  enum class WriteAt { Stop, StepEnd, Raise };
  std::string write_step(WriteAt at, bool hand_over = false, const OverflowFacts* stop = nullptr);
  void take_back_calls(FinishedStep& done);
  // The step's calls, taken out of the state with what its files need (the state's lock held).
  FinishedStep take_step_calls(StepCalls& s, GuardStepEnd&& guarded) const;
  const std::string& staging_of(StepCalls& s) const;
  const Config config_;
  const SessionPaths paths_;
  CollectionGate gate_;
  Guarded<StepCalls> state_{LockLevel::Step};
  CallNumbering numbering_;
  CodeRegistry codes_;  // GIL
  Selection selection_;
  TensorCapture capture_;
  DeferredCalls deferred_;  // after capture_: it reads capture_'s pending statistics
  OverflowGuard guard_;     // after codes_, which it reaches
  StepWriter writer_;
  SaidOnce said_;
  BackwardScope backward_scope_;  // follows numbering_'s ticket
  PeerStopFlag peer_stop_;
  HookContext hooks_{gate_,           numbering_, selection_,           capture_,
                     backward_scope_, codes_,     DumpFormat::of(config_)};  // last
};

std::shared_ptr<Session> current_session();
void set_current_session(std::shared_ptr<Session> s);

}  // namespace msprobe
