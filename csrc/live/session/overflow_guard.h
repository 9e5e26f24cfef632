// Task overflow_check: the overflow guard. It owns everything a judgement needs across calls: the
// started models' tensors, the watch that judges each call, the decisions the judgements lead to,
// the headroom of 16-bit call sites and the loss scaler's side of the step, in one GuardState
// under its own lock. It judges the recorded calls (judge_call) and what is not a recorded call (a
// started model's output, the gradients at the end of a backward pass and before an optimizer
// step, the loss scale), and says what the step's files need of it (end_step).
//
// Threading: the guard's lock is of LockLevel::Guard (core/guarded.h): taken after the session's
// step lock where both are held (the session's write of a step), never before it (debug builds
// refuse it), and never held while waiting for the GIL or a device. Everything marked "GIL
// required" runs on a Python thread with the GIL; the rest may run on the autograd engine's
// threads too.
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
#include "core/report.h"
#include "core/step_ticket.h"
#include "live/capture/call_stack.h"
#include "live/capture/live_tensors.h"
#include "live/overflow/model_tensors.h"
#include "live/overflow/overflow_watch.h"
#include "live/session/step_state.h"

namespace msprobe {

struct PythonSide;

// The live side of the headroom warnings (core/headroom.h, guard_headroom.cpp): which call site a
// stored call is, and what its 16-bit outputs tell the Headroom.
// "Tensor.__mul__.3.forward" at `stack` -> the site {"Tensor.__mul__", the stack's identity}.
HeadroomSite headroom_site(const std::string& name, const StackPtr& stack);

// The float16/bfloat16 outputs of an API forward call, told to `headroom`; the site's record when
// it just reached the threshold. Under the guard's lock.
std::optional<HeadroomRecord> observe_headroom(Headroom& headroom, const StoredCall& call,
                                               int64_t step);

// What judge_call says of a recorded call.
struct CallVerdict {
  bool dropped = false;       // numbered by a step that has ended since: not judged, not stored
  bool keep_tensors = false;  // its tensors are the evidence of a finding
  std::optional<OverflowEvent> event;
};

// What the guard adds to the end of a step (Session::write_step).
struct GuardStepEnd {
  // The step was due and is done with: written now (write), or judged not to be (a clean step of
  // task overflow_check). Neither: nothing was due, or a scaled step waits for step().
  bool closed = false;
  bool write = false;
  std::vector<std::string> said;  // held NaN/inf that did no damage, why a step is not written
  bool models_started = false;    // a started model's module stack names the calls' parents
  std::optional<Report> report;
  std::vector<Judgement> judgements;
};

// Everything the guard knows across calls; only the guard reaches it, under its lock.
struct GuardState {
  explicit GuardState(const StepTickets& tickets) : step(&tickets) {}
  // Which step the per-step parts below are of: the watch's and the decisions' step, the
  // unstored finding and the loss scale (OverflowGuard::reset_step at the first look in the next).
  StepLocal step;
  ModelTensors models;  // the started models' tensors, across steps
  // Null without a watching task.
  std::unique_ptr<OverflowWatch> watch;
  std::unique_ptr<OverflowDecisions> decisions;
  std::unique_ptr<Headroom> headroom;  // overflow_check with headroom > 0; kept across steps
  bool flagged_unstored = false;       // a finding no stored call carries: the step is written
  // The training monitor's alert (alert.dump_step_on) that flags this step: it is written.
  std::optional<std::string> monitor_alert;
  std::optional<double> scale_before;  // the loss scaler's scale, when it scaled this step's loss
};

class OverflowGuard {
 public:
  // `source` names the config in a rules file's error. `tickets`: the session's step, which the
  // guard reads (a call numbered by an ended step is dropped) and follows.
  OverflowGuard(const Config& config, const SessionPaths& paths, CodeRegistry& codes,
                const std::string& source, const StepTickets& tickets);
  ~OverflowGuard();  // takes the GIL to let the Python objects go, or leaks them at exit
  OverflowGuard(const OverflowGuard&) = delete;
  OverflowGuard& operator=(const OverflowGuard&) = delete;

  void set_python_side(std::unique_ptr<PythonSide> side);  // GIL required
  PythonSide* python_side() const { return py_.get(); }

  // start(); `first`: the step's first start().
  void begin_step(bool first);
  // The step's end as the guard sees it: whether it is written now (`calls_due`: calls were
  // stored since the last write), and what its report holds. `at_stop`: a scaled step waits for
  // step(), when the loss scaler has said whether it skipped it.
  // `stop`: the facts of the stop that ends the step, completed since its decision (its source
  // line, replays, calls run after it): the report takes them.
  GuardStepEnd end_step(bool calls_due, bool at_stop, const std::optional<PeerOverflow>& peer,
                        const OverflowFacts* stop = nullptr);
  // A finding that no stored call carries (a started model's output, an optimizer's step) makes
  // the step due.
  bool flagged_unstored() const;
  // A finding of this step was told already (action continue goes on after it).
  bool step_flagged() const;
  // The training monitor's alert flags this step (its line, for the report): it is written as
  // a flagged step, though nothing in it overflowed; the first alert of a step is kept.
  void flag_for_monitor(const std::string& alert);

  // A recorded call, judged (its source line, a headroom warning said after the lock).
  CallVerdict judge_call(const StoredCall& call, const LiveTensors& live);
  // What a started model returned, judged and not stored: msprobe records no started model. Its
  // facts name `call`; its source line is the model's caller.
  std::optional<OverflowEvent> judge_model_output(StoredCall&& call, const LiveTensors& live);
  // The autograd engine ended a backward pass with a backward op anomaly.
  std::optional<OverflowEvent> end_of_backward();
  // What the looks around an optimizer's step (named by its class) found: before it, gradients
  // that hold NaN/inf (`bad`; `reduced`: averaged across the ranks under torch.distributed), or
  // state that does (`state`, "exp_avg_sq", of `parameter`, and `more` other state tensors);
  // after a step whose calls were not judged, what it wrote (`bad`: parameters and "<key> of
  // <parameter>", finite before it). `caller`: the program's stack, whose line a stop names.
  struct OptimizerLook {
    enum class When { Gradients, State, Update, Settings };
    When when = When::Gradients;
    std::string optimizer;
    std::vector<std::string> bad;
    std::vector<ArgFacts> bad_tensors;  // the first of `bad`: dtype, shape, NaN/+inf/-inf counts
    bool reduced = false;
    std::string state, parameter;
    size_t more = 0;
    std::vector<std::pair<std::string, double>> settings;  // When::Settings
  };
  std::optional<OverflowEvent> judge_optimizer(OptimizerLook look, const StackPtr& caller);
  // The loss scaler scaled this step's loss, its scale `before` (at start() or scale());
  // judge_loss_scale(): its scale `after` now, at step(): a stop to raise, or nothing.
  void set_loss_scaled(double before);
  std::optional<OverflowEvent> judge_loss_scale(double after, bool skipped);

  // A parameter or buffer of a model given to start(); the names of those of `tensors` that are
  // a started model's parameters (nullopt for any other).
  void add_model_tensor(const std::string& name, const at::Tensor& t, bool buffer);
  std::vector<std::optional<std::string>> parameter_names(const std::vector<at::Tensor>& tensors);
  // NaN/inf in `t` was made inside a torch.compile'd region, where no call is recorded.
  void mark_compiled_output(const at::Tensor& t);

  // The 16-bit call sites said to near their dtype's range (debugger.headroom).
  std::vector<HeadroomRecord> headroom_warned() const;

 private:
  // Runs fn(state, the session's current step) under the guard's lock, the state's per-step
  // parts cleared first where the step moved on since the guard's last look (so a step's end
  // takes no guard lock). Const: a look may clear the last step's state.
  template <typename Fn>
  decltype(auto) locked(Fn&& fn) const {
    return state_.with_lock([&](GuardState& g) -> decltype(auto) {
      if (g.step.moved_on()) reset_step(g);
      return fn(g, tickets_.current());
    });
  }
  static void reset_step(GuardState& g);
  std::optional<OverflowEvent> optimizer_gradients(OptimizerLook& look);
  std::optional<OverflowEvent> optimizer_state(const OptimizerLook& look);
  std::optional<OverflowEvent> optimizer_update(OptimizerLook& look);
  std::optional<OverflowEvent> optimizer_settings(const OptimizerLook& look);
  // A stored call's finding as facts; its source line comes later.
  OverflowFacts facts_of(const GuardState& g, const StepTicket& ticket, const StoredCall& call,
                         const Verdict& v) const;
  // The finding's source line (the GIL is taken), into `event` and the step's report (a stop's
  // reaches the report with its other late facts, at end_step). Without the guard's lock: a
  // thread holding the GIL may be waiting for it.
  void tell_source(const StackPtr& stack, const std::string& call, OverflowEvent* event);
  // The one line said for a 16-bit call site that reached the headroom.
  void say_headroom(const HeadroomRecord& r, const StoredCall& call, int rank);

  const Config& config_;
  const SessionPaths& paths_;
  CodeRegistry& codes_;  // GIL
  const StepTickets& tickets_;
  mutable Guarded<GuardState> state_;
  std::unique_ptr<PythonSide> py_;  // GIL
};

}  // namespace msprobe
