// One debugging session: the validated config, the step and rank gates, the per-step call
// counters and record buffer, and the writer of the step's files. Hooks find the current session
// through current_session(); a new PrecisionDebugger replaces it.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/config.h"
#include "core/output_files.h"
#include "core/overflow_facts.h"
#include "core/record.h"
#include "core/report.h"
#include "core/selection.h"
#include "torch/call_stack.h"
#include "torch/describe_options.h"
#include "torch/device_stats.h"
#include "torch/live_tensors.h"
#include "torch/model_tensors.h"
#include "torch/overflow_watch.h"
#include "torch/pending_stats.h"
#include "torch/stats_cache.h"
#include "torch/tensor_saver.h"

namespace msprobe {

struct StoredCall {
  CallRecord record;
  StackPtr stack;                          // may be null (no Python frames)
  std::optional<std::string> parent;       // enclosing module call, for construct.json
  std::optional<std::string> module_hint;  // a backward call's forward module, for messages
  std::optional<int> peer_rank;  // a collective's anomalous result came from this rank's input
  // Task overflow_check: tensors of a call with a finding, saved if the step is dumped.
  std::vector<std::pair<at::Tensor, std::string>> tensors;
};

// What the hook that submitted a call must do next (task overflow_check).
struct OverflowEvent {
  OverflowFacts facts;
  bool notify = false;  // the step's first flagged finding: debugger.overflow, on_overflow
  bool raise = false;
  bool queue_end_of_backward = false;
};

// The Python objects the engine hands facts to: given once, at creation, so nothing is looked up
// by name when an overflow happens. GIL required to use them.
struct PythonSide;

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
  void step();            // writes if stop() was not called, then moves to the next step
  void pause();           // forward_backward_dump_end: stop collecting until the next start()
  bool finished() const;  // past the last configured step
  int64_t current_step() const { return step_; }
  std::string step_dir() const;                              // <dump_path>/step<S>/rank<R>
  int folder_rank() const { return rank_ < 0 ? 0 : rank_; }  // outside distributed: rank 0

  // Hot path.
  bool collecting() const { return collecting_.load(std::memory_order_relaxed); }
  int64_t next_index(const std::string& key);  // n of `key` within the step
  // Unique among all sessions' steps: API hooks reset their own call counters when it changes.
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  // Stores a call; with task overflow_check judges it first (`live`: its tensors) and says what
  // the hook must do about it.
  std::optional<OverflowEvent> add(StoredCall&& call, const LiveTensors* live = nullptr);
  bool watching() const { return watch_ != nullptr; }
  StackPtr capture_stack() { return codes_.capture(); }  // GIL required
  int rank() const { return rank_; }
  Selection& selection() { return selection_; }
  const DescribeOptions& describe_options() const { return options_; }
  const StatsCache& stats_cache() const { return stats_cache_; }

  // Task overflow_check. GIL required for all of these.
  void set_python_side(std::unique_ptr<PythonSide> side);
  PythonSide* python_side() const { return py_.get(); }
  ModelTensors& models() { return models_; }
  // A tensor that came out of a torch.compile'd model: NaN/inf in it was made where no call is
  // recorded.
  void mark_compiled_output(const at::Tensor& t);
  // The hooks raise at the origin; this writes the step and ends it first, so the next start()
  // begins the next step (and a step() in the user's handler does not skip a number).
  // Returns why the step's files could not be written, or "" when they were (or none were due).
  std::string end_step_for_raise();
  // Called by the autograd engine when a backward pass with a backward op anomaly ends.
  std::optional<OverflowEvent> end_of_backward();
  void set_loss_scaled() { loss_scaled_ = true; }
  // At step(), for a step whose loss a scaler scaled: `before` at start() (or scale()), `after`
  // now. A stop to raise, or nothing.
  std::optional<OverflowEvent> judge_loss_scale(double before, double after);
  bool step_flagged() const;

  // Batched sync (overflow_check.sync). Whether `call` must queue: behind calls already queued,
  // or for statistics still on the device, or because every call is judged in batches.
  bool must_defer(const StoredCall& call);
  // Queues a call with its live tensors; true when it is time to flush (sync "call", or a full
  // batch). Thread-safe.
  bool defer(StoredCall&& call, LiveTensors&& live);
  bool has_deferred() const;
  // Reads every queued call's device statistics back at once, then stores and judges the calls
  // in the order they were made, as add() would have one by one. Returns what the hooks must do;
  // a raise carries how many calls ran after its call.
  std::vector<OverflowEvent> resolve_deferred();
  // A backward pass queued calls under task overflow_check: their verdicts are wanted at its
  // end, before an optimizer uses the gradients. True once per pass (the caller queues it).
  bool claim_backward_flush();
  // Times this session's statistics waited for a device: the process's count since the session
  // began (the statistics code does not know its session; one session is live at a time).
  int64_t host_syncs() const { return msprobe::host_syncs() - host_syncs_at_start_; }

  // torch.distributed: another rank stopped. Set from the watcher thread; the hooks read it.
  void set_peer_stopped() { peer_stopped_.store(true, std::memory_order_release); }
  bool peer_stopped() const { return peer_stopped_.load(std::memory_order_acquire); }
  // Writes this rank's records of the current step as a flagged step whose report names the
  // peer, and ends the step. Returns the folder written ("" if nothing could be). GIL required.
  std::string stop_for_peer(const PeerStop& peer);
  // True the first time `what` is asked about in this session: warnings said once.
  bool warn_once(const std::string& what);
  // True the first time only: the tool's own statistics failures are said once per session.
  bool first_statistics_failure() { return !said_statistics_failure_.exchange(true); }

 private:
  void advance();
  void warn_unmatched_selection();     // once per entry and session
  void write_step();                   // GIL required
  std::string write_step_or_report();  // "" or why the step could not be written
  void clear_step();
  // The step's files, dump.json last; `written` collects the others, for removal on failure.
  void write_step_files(const std::string& dir, const std::vector<const CallRecord*>& records,
                        std::vector<std::string>& written);
  void write_overflow_files(const std::string& dir, std::vector<std::string>& written);
  // The one-screen summary of a written (or unwritable) flagged step; `dump` says where it went.
  void print_overflow_summary(const std::string& dump) const;
  std::optional<OverflowFacts> first_anomaly() const;  // for the report: what flagged the step
  bool dump_budget_left() const;  // overflow_nums not reached (this step's dump counts as left)
  bool should_dump_step();        // task overflow_check: flagged, not skipped, within budget
  OverflowFacts describe_overflow(const StoredCall& call, const Verdict& v,
                                  const LiveTensors& live);
  void keep_tensors(StoredCall& call, const LiveTensors& live);

  Config config_;
  std::string package_dir_;
  std::string dump_root_;
  int64_t step_ = 0;
  int rank_ = -1;
  bool dirty_ = false;  // collected since the last write
  std::atomic<bool> collecting_{false};
  std::atomic<uint64_t> epoch_;

  std::mutex mu_;  // guards counters_ and calls_ (backward hooks run on autograd threads)
  std::unordered_map<std::string, int64_t> counters_;
  std::vector<StoredCall> calls_;
  CodeRegistry codes_;
  Selection selection_;
  std::string library_dir_;
  std::unique_ptr<TensorSaver> saver_;  // tasks tensor and overflow_check
  StatsCache stats_cache_;
  FileNames file_names_;  // the tensor files of the step
  DescribeOptions options_;
  bool reported_write_error_ = false;
  std::string json_buffer_;  // the files' text, its capacity kept from step to step
  bool collected_this_step_ = false;
  bool step_began_ = false;  // start() was called in this step
  bool cleaned_temporaries_ = false;
  std::set<std::string> warned_;

  // Task overflow_check.
  ModelTensors models_;
  std::unique_ptr<OverflowWatch> watch_;
  std::unique_ptr<PythonSide> py_;
  std::optional<OverflowFacts> step_overflow_;      // the step's first flagged finding
  std::optional<OverflowFacts> step_absorbed_;      // the step's first absorbed anomaly
  std::optional<OverflowFacts> pending_backward_;   // a backward op origin, until the pass ends
  std::optional<OverflowFacts> reached_gradients_;  // ... that reached gradients in a scaled step
  bool end_of_backward_queued_ = false;
  bool loss_scaled_ = false;
  bool skipped_by_scaler_ = false;  // not written unless dump_skipped_steps
  bool ended_by_raise_ = false;     // step_ already moved on; the next step() must not
  int64_t dumped_steps_ = 0;
  bool step_dumped_ = false;
  bool said_no_more_dumps_ = false;

  // Batched sync.
  struct DeferredCall {
    StoredCall call;
    LiveTensors live;
  };
  std::mutex deferred_mu_;
  std::vector<DeferredCall> deferred_;
  std::atomic<size_t> deferred_count_{0};  // deferred_.size(), read without the lock
  PendingStats pending_stats_;
  bool backward_flush_queued_ = false;  // under deferred_mu_

  std::atomic<bool> peer_stopped_{false};
  int64_t host_syncs_at_start_ = msprobe::host_syncs();
  std::optional<PeerStop> peer_stop_;  // the step being ended by a peer stop
  std::atomic<bool> said_statistics_failure_{false};
};

std::shared_ptr<Session> current_session();
void set_current_session(std::shared_ptr<Session> s);

}  // namespace msprobe
