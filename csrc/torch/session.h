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
#include "torch/tensor_saver.h"

namespace msprobe {

struct StoredCall {
  CallRecord record;
  StackPtr stack;                     // may be null (no Python frames)
  std::optional<std::string> parent;  // enclosing module call, for construct.json
};

class Session {
 public:
  // `package_dir`: frames under it are left out of stack.json. `source` names the config in
  // errors about it (ConfigError).
  Session(Config config, std::string package_dir, const std::string& source);
  ~Session();

  const Config& config() const { return config_; }
  bool apis_hooked() const { return config_.level != Level::L0; }
  bool modules_hooked() const { return config_.level != Level::L1; }

  // Lifecycle, called from Python with the GIL held.
  void start(int rank);   // rank -1: torch.distributed not initialized
  void stop();            // writes the step's files (everything collected in this step so far)
  void step();            // writes if stop() was not called, then moves to the next step
  void pause();           // forward_backward_dump_end: stop collecting until the next start()
  bool finished() const;  // past the last configured step: hooks can go
  int64_t current_step() const { return step_; }
  std::string step_dir() const;  // <dump_path>/step<S>/rank<R>

  // Hot path.
  bool collecting() const { return collecting_.load(std::memory_order_relaxed); }
  int64_t next_index(const std::string& key);  // n of `key` within the step
  void add(StoredCall&& call);
  StackPtr capture_stack() { return codes_.capture(); }  // GIL required
  Selection& selection() { return selection_; }
  const DescribeOptions& describe_options() const { return options_; }

 private:
  void write_step();  // GIL required
  void clear_step();

  Config config_;
  std::string package_dir_;
  std::string dump_root_;
  int64_t step_ = 0;
  int rank_ = -1;
  bool started_ = false;
  bool dirty_ = false;  // collected since the last write
  std::atomic<bool> collecting_{false};

  std::mutex mu_;  // guards counters_ and calls_ (backward hooks run on autograd threads)
  std::unordered_map<std::string, int64_t> counters_;
  std::vector<StoredCall> calls_;
  CodeRegistry codes_;
  Selection selection_;
  std::unique_ptr<TensorSaver> saver_;  // task tensor
  DescribeOptions options_;
  bool reported_write_error_ = false;
};

std::shared_ptr<Session> current_session();
void set_current_session(std::shared_ptr<Session> s);

}  // namespace msprobe
