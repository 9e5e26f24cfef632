// One debugging session: the validated config, the step and rank gates, the per-step call
// counters and record buffer, and the writer of the step's files. Hooks find the current session
// through current_session(); a new PrecisionDebugger replaces it.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/config.h"
#include "core/record.h"
#include "core/selection.h"
#include "torch/call_stack.h"
#include "torch/describe_options.h"
#include "torch/overflow_watch.h"
#include "torch/tensor_saver.h"

namespace msprobe {

struct StoredCall {
  CallRecord record;
  StackPtr stack;                          // may be null (no Python frames)
  std::optional<std::string> parent;       // enclosing module call, for construct.json
  std::optional<std::string> module_hint;  // a backward call's forward module, for messages
  // Task overflow_check: tensors of a call with a finding, saved if the step is dumped.
  std::vector<std::pair<at::Tensor, std::string>> tensors;
};

// What an overflow stop tells the user about the guilty call.
struct OverflowStop {
  Finding finding;
  std::optional<std::string> module;
  std::optional<std::string> source;  // "<file>:<line>: <code>" of the innermost user frame
  std::vector<std::string> tensors;   // "output[0]: torch.float16 [8, 4]: 0 NaN, 3 +inf, 0 -inf"
  int64_t step = 0;
  int rank = -1;
  std::string dump_dir;
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
  void step();            // writes if stop() was not called, then moves to the next step
  void pause();           // forward_backward_dump_end: stop collecting until the next start()
  bool finished() const;  // past the last configured step, overflow_nums reached or stopped
  int64_t current_step() const { return step_; }
  std::string step_dir() const;  // <dump_path>/step<S>/rank<R>

  // Hot path.
  bool collecting() const { return collecting_.load(std::memory_order_relaxed); }
  int64_t next_index(const std::string& key);  // n of `key` within the step
  // Stores a call; with task overflow_check judges it first (`live`: its tensors) and returns
  // what to raise when it must stop the run.
  std::optional<OverflowStop> add(StoredCall&& call, const LiveTensors* live = nullptr);
  bool watching() const { return watch_ != nullptr; }
  // Writes the flagged step and ends the session: the stop's files are on disk before the
  // exception leaves the hooked call. GIL required.
  void end_with_overflow();
  StackPtr capture_stack() { return codes_.capture(); }  // GIL required
  int rank() const { return rank_; }
  Selection& selection() { return selection_; }
  const DescribeOptions& describe_options() const { return options_; }

 private:
  void write_step();  // GIL required
  void write_step_or_report();
  void clear_step();
  void write_overflow_files(const std::string& dir);
  OverflowStop describe_stop(const StoredCall& call, const Finding& f, const LiveTensors& live);
  void keep_tensors(StoredCall& call, const LiveTensors& live);

  Config config_;
  std::string package_dir_;
  std::string dump_root_;
  int64_t step_ = 0;
  int rank_ = -1;
  bool dirty_ = false;  // collected since the last write
  std::atomic<bool> collecting_{false};

  std::mutex mu_;  // guards counters_ and calls_ (backward hooks run on autograd threads)
  std::unordered_map<std::string, int64_t> counters_;
  std::vector<StoredCall> calls_;
  CodeRegistry codes_;
  Selection selection_;
  std::string library_dir_;
  std::unique_ptr<TensorSaver> saver_;  // tasks tensor and overflow_check
  std::unique_ptr<OverflowWatch> watch_;
  bool ended_ = false;
  DescribeOptions options_;
  bool reported_write_error_ = false;
};

std::shared_ptr<Session> current_session();
void set_current_session(std::shared_ptr<Session> s);

}  // namespace msprobe
