// Task overflow_check: the overflow guard's side of a session. It judges what is not a recorded
// call (a started model's output, the gradients at the end of a backward pass and before an
// optimizer step, the loss scale), keeps what the step's report adds to a finding (its source
// line, replays, headroom), holds the started models' tensors, and holds the objects it hands
// findings to in Python.
//
// Threading: the step's state is the session's, reached only under its one lock (Guarded), never
// held while waiting for the GIL or a device. Everything marked "GIL required" runs on a Python
// thread with the GIL; the rest may run on the autograd engine's threads too.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/guarded.h"
#include "core/headroom.h"
#include "core/overflow_decisions.h"
#include "live/capture/call_stack.h"
#include "live/capture/live_tensors.h"
#include "live/session/session_paths.h"
#include "live/session/step_state.h"

namespace msprobe {

struct PythonSide;

// The loss scaler's side of a step: a step whose loss it scaled waits for step(), when the scale
// it left says whether it skipped the step.
class LossScaleWatch {
 public:
  LossScaleWatch(const SessionPaths& paths, Guarded<StepState>& state)
      : paths_(paths), state_(state) {}
  void set_scaled();
  // `before` at start() (or scale()), `after` now: a stop to raise, or nothing.
  std::optional<OverflowEvent> judge(double before, double after);

 private:
  const SessionPaths& paths_;
  Guarded<StepState>& state_;
};

// The parameters and buffers of the models given to start(), and what came out of a compiled one.
class ModelRegistry {
 public:
  explicit ModelRegistry(Guarded<StepState>& state) : state_(state) {}
  void add(const std::string& name, const at::Tensor& t, bool buffer);
  // NaN/inf in `t` was made inside a torch.compile'd region, where no call is recorded.
  void mark_compiled_output(const at::Tensor& t);

 private:
  Guarded<StepState>& state_;
};

class OverflowGuard {
 public:
  OverflowGuard(const Config& config, const SessionPaths& paths, Guarded<StepState>& state,
                CodeRegistry& codes);
  ~OverflowGuard();  // takes the GIL to let the Python objects go, or leaks them at exit
  OverflowGuard(const OverflowGuard&) = delete;
  OverflowGuard& operator=(const OverflowGuard&) = delete;

  LossScaleWatch& loss_scale() { return loss_scale_; }
  ModelRegistry& models() { return models_; }
  void set_python_side(std::unique_ptr<PythonSide> side);  // GIL required
  PythonSide* python_side() const { return py_.get(); }

  // A stored call's finding as facts (under the step's lock); its source line comes later.
  OverflowFacts facts_of(const StepState& s, const StoredCall& call, const Verdict& v) const;
  // The finding's source line (the GIL is taken), into `event` and the step's report. Without the
  // step's lock: a thread holding the GIL may be waiting for it.
  void tell_source(const StackPtr& stack, const std::string& call, OverflowEvent* event);
  // The one line said for a 16-bit call site that reached the headroom.
  void say_headroom(const HeadroomRecord& r, const HeadroomSite& site,
                    const std::optional<std::string>& parent, const StackPtr& stack, int rank);
  // The 16-bit call sites said to near their dtype's range (debugger.headroom).
  std::vector<HeadroomRecord> headroom_warned() const;
  // An op origin's replays (facts.replay, not_replayed), kept for the step's report.
  void set_replay(const OverflowFacts& facts);
  // Batched sync: how many calls of the batch ran after the stop's call, for the report.
  void set_raised_calls_later(const std::string& call, int64_t later);

  // What a started model returned, judged and not stored: msprobe records no started model. Its
  // facts name `call`; its source line is the model's caller.
  std::optional<OverflowEvent> judge_model_output(StoredCall&& call, const LiveTensors& live);
  // The autograd engine ended a backward pass with a backward op anomaly.
  std::optional<OverflowEvent> end_of_backward();
  // Before an optimizer (named by its class) writes the gradients: `bad` names those that hold
  // NaN/inf. `reduced`: under torch.distributed, where they were averaged across the ranks.
  std::optional<OverflowEvent> judge_optimizer_gradients(const std::string& optimizer,
                                                         std::vector<std::string> bad,
                                                         bool reduced);
  // Before an optimizer writes the parameters: its `state` ("exp_avg_sq") of `parameter`, and
  // `more` other state tensors, hold NaN/inf.
  std::optional<OverflowEvent> judge_optimizer_state(const std::string& optimizer,
                                                     const std::string& state,
                                                     const std::string& parameter, size_t more);

 private:
  const Config& config_;
  const SessionPaths& paths_;
  Guarded<StepState>& state_;
  CodeRegistry& codes_;  // GIL
  LossScaleWatch loss_scale_;
  ModelRegistry models_;
  std::unique_ptr<PythonSide> py_;  // GIL
};

}  // namespace msprobe
