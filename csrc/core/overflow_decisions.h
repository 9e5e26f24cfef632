// The live guard's decisions for one rank (docs/overflow-detection.md): given each judged call's
// verdict, the end of a backward pass, what the loss scaler did and the dump budget, whether to
// tell the program, stop, dump, wait for the end of the pass, or leave a step to its scaler. No
// torch here: the hooks judge calls (OverflowWatch) and act on these decisions.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/detector.h"
#include "core/overflow_facts.h"

namespace msprobe {

// What the guard made of one call.
struct Verdict {
  std::optional<Finding> finding;
  Judgement judgement = Judgement::Flagged;
  std::optional<Origin> origin;
  std::optional<std::string> parameter;  // origin parameter
  std::string note;
  bool flagged = false;          // makes the step dumped
  bool stop = false;             // raise now
  bool end_of_backward = false;  // a backward op origin: judged when the backward pass ends
  // The damage rule: this call's NaN/inf is in tensors that need no gradient: held, told at the
  // end of the step unless a later call is caught doing damage with it. Ids count from 0 a step.
  bool hold = false;
  // A held NaN/inf did damage at this call: the held origin's id, and what it did.
  std::optional<size_t> caught;
  std::string caught_how;
};

// What the hook that submitted a call must do next.
struct OverflowEvent {
  OverflowFacts facts;
  bool notify = false;  // the step's first flagged finding: debugger.overflow, on_overflow
  bool raise = false;
  bool queue_end_of_backward = false;
};

// The decision about one judged call.
struct CallDecision {
  std::optional<OverflowEvent> event;  // something to tell or raise
  bool keep_tensors = false;           // evidence for the dump: its tensors are saved
  bool tell_absorbed = false;          // the first absorbed anomaly of the step: one stderr line
  bool wants_source = false;           // facts were kept: their source line is wanted
};

// How the step ended a held NaN/inf that did no damage (OverflowWatch::finish_held), by hold id.
struct HeldEnd {
  std::string still_in;          // a call whose output holds it and is alive at the end of the step
  std::string turned_finite_by;  // the first call that took it and gave finite outputs
};

// Whether a finished step is written, and a line to say (once) when it is not.
struct DumpDecision {
  bool dump = false;
  std::string say;
};

// What a loss scaler's scale at step() means, and a line to say.
struct ScaleDecision {
  std::optional<OverflowEvent> event;
  std::string say;
};

class OverflowDecisions {
 public:
  explicit OverflowDecisions(const OverflowSection& options);

  // One call's decision, in two looks at the same state (under the caller's one lock): whether
  // the decision keeps the call's facts, and the decision itself, from the facts the caller
  // built before it (with step, rank and dump_dir filled in) where keeps_facts() said so, and
  // nullopt where not: a call whose facts nothing keeps (an explained masked score, a second
  // finding) costs no facts. `backward`: the call is a backward record.
  bool keeps_facts(const Verdict& v, bool backward) const;
  CallDecision on_call(const Verdict& v, bool backward, std::optional<OverflowFacts> facts);

  // A backward pass ended. True when a backward op origin waits for its verdict: then the caller
  // looks at the parameters' gradients (without the lock) and calls backward_verdict().
  bool backward_pass_ended();
  // `gradients`: parameters whose gradients are not finite; `models_known`: a model was given
  // to start() (without one, a backward op origin counts as reaching the gradients).
  std::optional<OverflowEvent> backward_verdict(bool models_known,
                                                std::vector<std::string> gradients);

  // The loss scaler scaled this step's loss: its backward findings wait for step().
  void set_loss_scaled() { loss_scaled_ = true; }
  bool loss_scaled() const { return loss_scaled_; }
  // Something of this step was told (a finding; with action continue the step goes on).
  bool step_flagged() const { return step_overflow_.has_value(); }
  // At step(): the scale `before` (at start() or scale()) and `after`; `skipped`: the scaler says
  // it skipped the step (DeepSpeed's, whose hysteresis keeps the scale at a first overflow).
  // `blank`: facts naming no call, for a scale that fell too low in a step without findings.
  ScaleDecision loss_scale(double before, double after, bool skipped, int64_t step,
                           const OverflowFacts& blank);

  // An optimizer is about to write `gradients` (names), which hold NaN/inf, into the parameters:
  // the last point before the damage. `blank`: facts naming the optimizer step, for gradients no
  // finding of this step told of. Where they came from: averaged across the ranks (`reduced`,
  // origin peer), a compiled region's backward (`compiled`, origin op), else an earlier step
  // that was not zeroed or a C++ autograd function (origin input). A told origin is not told
  // again (its stop was decided); a scaled step's finding stops here: its scaler did not skip.
  struct GradientSource {
    bool reduced = false;
    bool compiled = false;
    bool earlier_step_left = false;  // an earlier step of this debugger left gradients
  };
  std::optional<OverflowEvent> optimizer_gradients(std::vector<std::string> gradients,
                                                   GradientSource source,
                                                   const OverflowFacts& blank);

  // An optimizer is about to step with what would write NaN/inf into the parameters. Either its
  // state holds NaN/inf (`state` of `parameter`, and `more` other state tensors): written before
  // this step, by a checkpoint or an update that nothing judged (L0 records no optimizer call);
  // origin parameter. Or one of its settings is not finite (`setting`, "lr of param_groups[0]",
  // its `value`): its update would write NaN/inf into every parameter it steps; origin op. Both
  // stop before the step, so that no parameter (nor ZeRO's fp32 partition) takes it.
  struct BeforeStep {
    std::string state, parameter;
    size_t more = 0;
    std::string setting;  // non-empty: a setting's look
    double value = 0.0;
  };
  std::optional<OverflowEvent> optimizer_before_step(const BeforeStep& before,
                                                     const std::string& optimizer,
                                                     const OverflowFacts& blank);

  // An optimizer's step, whose calls were not judged one by one, left NaN/inf in `written` (its
  // parameters, "<key> of <parameter>" for its state), all finite before it: its own arithmetic
  // made them (a zero eps, an lr or weight decay out of range). Origin op, after the step.
  std::optional<OverflowEvent> optimizer_update(std::vector<std::string> written,
                                                const std::string& optimizer,
                                                const OverflowFacts& blank);

  // Whether a finished step is written: flagged (or a peer stop), not left to its scaler, within
  // overflow_nums. A written step counts against overflow_nums once.
  DumpDecision dump_step(bool flagged, bool peer_stop, int64_t step);
  // overflow_nums not reached (this step's dump counts as left): facts name the dump folder.
  bool budget_left() const;

  // What flagged the step, for the report: the first notified finding, else the gradients the
  // scaler should have skipped, else the first absorbed anomaly.
  std::optional<OverflowFacts> first_anomaly() const;
  // The stderr line of the step's first absorbed anomaly ("" if none).
  std::string absorbed_line() const;
  // The end of the step: the held NaN/inf that did no damage ended as `ends` says (by hold id);
  // the lines to say (once per call site).
  std::vector<std::string> finish_held(const std::vector<HeldEnd>& ends);
  // Fill in facts kept for `call`: the source line of a finding that is not a stop (found
  // without the lock).
  void set_source(const std::string& call, const std::optional<std::string>& source);
  // A stop's facts, completed after its decision and before its step is written: its source
  // line, its replays (an op origin), and under batched sync how many calls ran after it. The
  // facts kept for its call take them.
  void complete(const OverflowFacts& stop);

  void new_step();

 private:
  // What on_call() will do with a verdict, worked out from the step so far without changing it.
  struct CallPlan {
    enum class Path { Clean, Hold, Caught, FedCollective, Told };
    Path path = Path::Clean;
    bool keeps_facts = false;
    bool notify = false, told = false;
    bool first_backward = false, first_scaled = false, first_absorbed = false;
  };
  CallPlan plan_call(const Verdict& v, bool backward) const;
  CallDecision on_caught(const Verdict& v);
  // A finding at an optimizer's step (its facts' origin set): told if it is the step's first,
  // raised as stop_on and action say.
  OverflowEvent told_at_optimizer(OverflowEvent e);
  bool feeds_collective(const Finding& f) const;
  CallDecision on_fed_collective(const Verdict& v);

  const OverflowSection& options_;
  std::optional<OverflowFacts> step_overflow_;      // the step's first flagged finding
  std::optional<OverflowFacts> step_absorbed_;      // the step's first absorbed anomaly
  std::optional<OverflowFacts> pending_backward_;   // a backward op origin, until the pass ends
  std::optional<OverflowFacts> reached_gradients_;  // ... that reached gradients in a scaled step
  struct Held {
    OverflowFacts facts;
    bool tell = false;  // the first hold at its call site: told if absorbed
    bool caught = false;
  };
  std::vector<Held> held_;  // by Verdict::hold id
  bool end_of_backward_queued_ = false;
  bool loss_scaled_ = false;
  bool skipped_by_scaler_ = false;  // not written unless dump_skipped_steps
  bool step_dumped_ = false;
  int64_t dumped_steps_ = 0;  // across steps
  bool said_no_more_dumps_ = false;
};

}  // namespace msprobe
