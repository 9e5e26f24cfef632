// The live guard's decisions, one rule of docs/overflow-detection.md at a time: what a judged call,
// the end of a backward pass, the loss scaler and the dump budget lead to.
#include <gtest/gtest.h>

#include <functional>

#include "core/overflow_decisions.h"

namespace msprobe {
namespace {

Verdict verdict(const std::string& call, Judgement j, bool flagged, bool stop,
                std::optional<Origin> origin = std::nullopt) {
  Verdict v;
  v.finding = Finding{};
  v.finding->call = call;
  v.judgement = j;
  v.flagged = flagged;
  v.stop = stop;
  v.origin = origin;
  return v;
}

Verdict op_origin(const std::string& call) {  // critical, raise under the defaults
  return verdict(call, Judgement::Flagged, true, true, Origin::Op);
}
Verdict downstream(const std::string& call) {  // high, no origin: flags, does not stop
  return verdict(call, Judgement::Flagged, true, false);
}
Verdict backward_op(const std::string& call) {
  Verdict v = verdict(call, Judgement::Flagged, true, false, Origin::Op);
  v.end_of_backward = true;
  return v;
}

class Decisions : public ::testing::Test {
 protected:
  OverflowSection options;
  int facts_made = 0;

  OverflowFacts facts_of(const Verdict& v) {
    ++facts_made;
    OverflowFacts f;
    f.finding = *v.finding;
    f.origin = v.origin;
    return f;
  }
  // As the guard decides: the facts built first, and only where the decision keeps them.
  CallDecision on(OverflowDecisions& d, const Verdict& v, bool backward = false) {
    std::optional<OverflowFacts> facts;
    if (d.keeps_facts(v, backward)) facts = facts_of(v);
    return d.on_call(v, backward, std::move(facts));
  }
};

TEST_F(Decisions, ACleanCallIsNoEventAndMakesNoFacts) {
  OverflowDecisions d(options);
  Verdict clean;  // no finding
  const CallDecision c = on(d, clean);
  EXPECT_FALSE(c.event);
  EXPECT_FALSE(c.keep_tensors);
  EXPECT_FALSE(c.wants_source);
  EXPECT_EQ(facts_made, 0);
  EXPECT_FALSE(d.first_anomaly());
}

TEST_F(Decisions, ExplainedFindingsNeverStopNotifyNorKeepTensors) {
  OverflowDecisions d(options);
  const CallDecision c =
      on(d, verdict("Tensor.masked_fill.0.forward", Judgement::Explained, false, false));
  EXPECT_FALSE(c.event);
  EXPECT_FALSE(c.keep_tensors);
  EXPECT_FALSE(c.tell_absorbed);
  EXPECT_EQ(facts_made, 0);
  EXPECT_FALSE(d.first_anomaly());
}

TEST_F(Decisions, AnOpOriginNotifiesAndRaisesWithItsFacts) {
  OverflowDecisions d(options);
  const CallDecision c = on(d, op_origin("Torch.log.0.forward"));
  ASSERT_TRUE(c.event);
  EXPECT_TRUE(c.event->notify);
  EXPECT_TRUE(c.event->raise);
  EXPECT_FALSE(c.event->queue_end_of_backward);
  EXPECT_EQ(c.event->facts.finding.call, "Torch.log.0.forward");
  EXPECT_TRUE(c.keep_tensors);
  EXPECT_TRUE(c.wants_source);
  ASSERT_TRUE(d.first_anomaly());
  EXPECT_EQ(d.first_anomaly()->finding.call, "Torch.log.0.forward");
}

TEST_F(Decisions, OnlyTheStepsFirstFlaggedFindingNotifies) {
  OverflowDecisions d(options);
  ASSERT_TRUE(on(d, downstream("Functional.linear.0.forward")).event);
  const CallDecision second = on(d, downstream("Functional.relu.0.forward"));
  EXPECT_FALSE(second.event);
  EXPECT_TRUE(second.keep_tensors);  // still evidence for the dump
  ASSERT_TRUE(d.first_anomaly());
  EXPECT_EQ(d.first_anomaly()->finding.call, "Functional.linear.0.forward");
  d.new_step();
  EXPECT_FALSE(d.first_anomaly());
  EXPECT_TRUE(on(d, downstream("Functional.relu.1.forward")).event);
}

TEST_F(Decisions, AStopAfterTheNoticeStillRaises) {
  OverflowDecisions d(options);
  on(d, downstream("Functional.linear.0.forward"));
  const CallDecision c = on(d, op_origin("Torch.log.0.forward"));
  ASSERT_TRUE(c.event);
  EXPECT_FALSE(c.event->notify);
  EXPECT_TRUE(c.event->raise);
}

TEST_F(Decisions, AbsorbedAnomaliesAreToldOnceAndDoNotStop) {
  OverflowDecisions d(options);
  const CallDecision c =
      on(d, verdict("Torch.nan_to_num.0.forward", Judgement::Absorbed, true, false, Origin::Input));
  EXPECT_FALSE(c.event);
  EXPECT_TRUE(c.tell_absorbed);
  EXPECT_TRUE(c.wants_source);
  ASSERT_TRUE(d.first_anomaly());
  EXPECT_EQ(d.first_anomaly()->finding.call, "Torch.nan_to_num.0.forward");
  const CallDecision again =
      on(d, verdict("Torch.nan_to_num.1.forward", Judgement::Absorbed, true, false, Origin::Input));
  EXPECT_FALSE(again.tell_absorbed);
  EXPECT_EQ(d.first_anomaly()->finding.call, "Torch.nan_to_num.0.forward");
}

TEST_F(Decisions, AKnownAbsorbingSiteIsNotToldAgain) {
  // The watch leaves `flagged` off for a call site that absorbed before: nothing to tell.
  OverflowDecisions d(options);
  const CallDecision c = on(
      d, verdict("Torch.nan_to_num.0.forward", Judgement::Absorbed, false, false, Origin::Input));
  EXPECT_FALSE(c.tell_absorbed);
  EXPECT_FALSE(d.first_anomaly());
}

TEST_F(Decisions, AFlaggedFindingOutranksAnAbsorbedOneInTheReport) {
  OverflowDecisions d(options);
  on(d, verdict("Torch.isnan.0.forward", Judgement::Absorbed, true, false, Origin::Input));
  on(d, op_origin("Torch.log.0.forward"));
  ASSERT_TRUE(d.first_anomaly());
  EXPECT_EQ(d.first_anomaly()->finding.call, "Torch.log.0.forward");
}

TEST_F(Decisions, ABackwardOpOriginWaitsForTheEndOfThePass) {
  OverflowDecisions d(options);
  const CallDecision c = on(d, backward_op("Torch.sqrt.0.backward"), true);
  ASSERT_TRUE(c.event);
  EXPECT_FALSE(c.event->notify);
  EXPECT_FALSE(c.event->raise);
  EXPECT_TRUE(c.event->queue_end_of_backward);
  // The pass's end is queued once, and what follows the origin does not notify.
  EXPECT_FALSE(on(d, backward_op("Torch.mul.0.backward"), true).event);
  EXPECT_FALSE(on(d, downstream("Torch.add.0.forward")).event);

  ASSERT_TRUE(d.backward_pass_ended());
  auto e = d.backward_verdict(true, {"net.0.weight", "net.0.bias"});
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->notify);
  EXPECT_TRUE(e->raise);
  EXPECT_EQ(e->facts.finding.call, "Torch.sqrt.0.backward");
  EXPECT_EQ(e->facts.gradients.parameters,
            (std::vector<std::string>{"net.0.weight", "net.0.bias"}));
  EXPECT_FALSE(e->facts.gradients.masked);
  EXPECT_FALSE(d.backward_pass_ended());  // judged once
}

TEST_F(Decisions, ABackwardAnomalyThatReachedNoGradientIsMaskedAndDoesNotStop) {
  OverflowDecisions d(options);
  on(d, backward_op("Torch.sqrt.0.backward"), true);
  ASSERT_TRUE(d.backward_pass_ended());
  auto e = d.backward_verdict(true, {});
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->notify);
  EXPECT_FALSE(e->raise);
  EXPECT_TRUE(e->facts.gradients.masked);
  EXPECT_EQ(e->facts.note, kMaskedNote);
}

TEST_F(Decisions, WithoutAModelABackwardAnomalyCountsAsReachingTheGradients) {
  OverflowDecisions d(options);
  on(d, backward_op("Torch.sqrt.0.backward"), true);
  ASSERT_TRUE(d.backward_pass_ended());
  auto e = d.backward_verdict(false, {});
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->raise);
  EXPECT_FALSE(e->facts.gradients.masked);
  EXPECT_NE(e->facts.note.find("no model was given to start()"), std::string::npos);
}

TEST_F(Decisions, ActionContinueOrNoOpInStopOnNeverRaisesAtTheEndOfThePass) {
  for (bool by_action : {true, false}) {
    OverflowSection o;
    if (by_action) {
      o.action = Action::Continue;
    } else {
      o.stop_on = {Origin::Input};
    }
    OverflowDecisions d(o);
    on(d, backward_op("Torch.sqrt.0.backward"), true);
    ASSERT_TRUE(d.backward_pass_ended());
    auto e = d.backward_verdict(true, {"w"});
    ASSERT_TRUE(e);
    EXPECT_TRUE(e->notify);
    EXPECT_FALSE(e->raise);
  }
}

TEST_F(Decisions, AScaledStepsBackwardFindingsWaitForTheScaler) {
  OverflowDecisions d(options);
  d.set_loss_scaled();
  const CallDecision c = on(d, downstream("Functional.linear.0.backward"), true);
  EXPECT_FALSE(c.event);  // no notice, no stop: the scaler may skip the step
  EXPECT_TRUE(c.wants_source);
  ASSERT_TRUE(d.first_anomaly());  // kept for the report, as the gradients that overflowed

  // The scale dropped: the scaler skipped the step. One line, no stop, no dump.
  ScaleDecision s = d.loss_scale(65536, 32768, false, 3, OverflowFacts{});
  EXPECT_FALSE(s.event);
  EXPECT_EQ(s.say,
            "msprobe_cpp: step 3: gradients overflowed at scale 65536; the loss scaler skipped the "
            "step");
  EXPECT_FALSE(d.dump_step(true, false, 3).dump);
}

TEST_F(Decisions, DumpSkippedStepsWritesTheStepsTheScalerSkipped) {
  options.dump_skipped_steps = true;
  OverflowDecisions d(options);
  d.set_loss_scaled();
  on(d, downstream("Functional.linear.0.backward"), true);
  d.loss_scale(65536, 32768, false, 0, OverflowFacts{});
  EXPECT_TRUE(d.dump_step(true, false, 0).dump);
}

TEST_F(Decisions, AScaleThatDidNotDropAfterNonFiniteGradientsStops) {
  OverflowDecisions d(options);
  d.set_loss_scaled();
  on(d, downstream("Functional.linear.0.backward"), true);
  ScaleDecision s = d.loss_scale(1024, 1024, false, 0, OverflowFacts{});
  ASSERT_TRUE(s.event);
  EXPECT_TRUE(s.event->notify);
  EXPECT_TRUE(s.event->raise);
  EXPECT_EQ(s.event->facts.finding.call, "Functional.linear.0.backward");
  EXPECT_EQ(s.event->facts.note,
            "the loss scale did not drop (1024): the loss scaler missed these non-finite "
            "gradients");
}

OverflowDecisions::BeforeStep state_look(const char* state, const char* parameter, size_t more) {
  OverflowDecisions::BeforeStep b;
  b.state = state;
  b.parameter = parameter;
  b.more = more;
  return b;
}

TEST_F(Decisions, AScalerThatSaysItSkippedIsBelievedThoughItsScaleHeld) {
  // DeepSpeed's hysteresis: the first overflow is skipped with the scale unchanged.
  OverflowDecisions d(options);
  d.set_loss_scaled();
  on(d, downstream("Functional.linear.0.backward"), true);
  ScaleDecision s = d.loss_scale(65536, 65536, true, 2, OverflowFacts{});
  EXPECT_FALSE(s.event);
  EXPECT_EQ(s.say,
            "msprobe_cpp: step 2: gradients overflowed at scale 65536; the loss scaler skipped "
            "the step (its scale held: hysteresis)");
}

TEST_F(Decisions, ANonFiniteOptimizerSettingStopsBeforeTheStep) {
  OverflowDecisions d(options);
  OverflowFacts blank;
  blank.finding.call = "(before AdamW.step)";
  auto setting = [](const char* name, double value) {
    OverflowDecisions::BeforeStep b;
    b.setting = name;
    b.value = value;
    return b;
  };
  EXPECT_FALSE(d.optimizer_before_step(setting("lr of param_groups[0]", 0.001), "AdamW", blank));
  EXPECT_FALSE(d.optimizer_before_step(setting("lr of param_groups[0]", 1e300), "AdamW", blank));
  auto e = d.optimizer_before_step(setting("lr of param_groups[1]", INFINITY), "AdamW", blank);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->raise);
  EXPECT_EQ(e->facts.origin, Origin::Op);
  EXPECT_EQ(e->facts.finding.call, "(before AdamW.step)");
  EXPECT_NE(e->facts.note.find("AdamW's lr of param_groups[1] is inf: its step would write"),
            std::string::npos)
      << e->facts.note;
  EXPECT_TRUE(d.optimizer_before_step(setting("eps of param_groups[0]", NAN), "AdamW", blank) ==
              std::nullopt)
      << "one stop a step";
}

TEST_F(Decisions, AScaleBelowMinLossScaleStopsEvenInACleanStep) {
  OverflowDecisions d(options);
  OverflowFacts blank;
  blank.finding.call = "(loss scaler)";
  ScaleDecision s = d.loss_scale(1.0, 0.5, false, 7, blank);
  ASSERT_TRUE(s.event);
  EXPECT_TRUE(s.event->raise);
  EXPECT_EQ(s.event->facts.finding.call, "(loss scaler)");
  EXPECT_EQ(s.event->facts.note,
            "the loss scale fell to 0.5, below min_loss_scale 1.0: the gradients overflow even "
            "unscaled");
}

TEST_F(Decisions, AScaleThatHeldInACleanStepSaysNothing) {
  OverflowDecisions d(options);
  const ScaleDecision s = d.loss_scale(1024, 2048, false, 0, OverflowFacts{});
  EXPECT_FALSE(s.event);
  EXPECT_TRUE(s.say.empty());
}

TEST_F(Decisions, ABackwardOpOriginInAScaledStepIsTheScalersUntilStep) {
  OverflowDecisions d(options);
  d.set_loss_scaled();
  on(d, backward_op("Torch.sqrt.0.backward"), true);
  ASSERT_TRUE(d.backward_pass_ended());
  EXPECT_FALSE(d.backward_verdict(true, {"w"}));
  ScaleDecision s = d.loss_scale(8, 8, false, 0, OverflowFacts{});
  ASSERT_TRUE(s.event);
  EXPECT_TRUE(s.event->raise);
  EXPECT_EQ(s.event->facts.finding.call, "Torch.sqrt.0.backward");
  EXPECT_EQ(s.event->facts.gradients.parameters, std::vector<std::string>{"w"});
}

// Gradient accumulation: each backward pass has an end of its own to judge at, so an origin in
// the second pass must queue it again, though the first pass queued one in the same step.
TEST_F(Decisions, EachBackwardPassOfAStepQueuesItsOwnEnd) {
  OverflowDecisions d(options);
  ASSERT_TRUE(on(d, backward_op("Torch.sqrt.0.backward"), true).event->queue_end_of_backward);
  ASSERT_TRUE(d.backward_pass_ended());
  auto masked = d.backward_verdict(true, {});  // reached no gradient: no stop, the step goes on
  ASSERT_TRUE(masked);
  EXPECT_FALSE(masked->raise);

  const CallDecision second = on(d, backward_op("Torch.sqrt.1.backward"), true);
  ASSERT_TRUE(second.event);
  EXPECT_TRUE(second.event->queue_end_of_backward);
  ASSERT_TRUE(d.backward_pass_ended());
  auto e = d.backward_verdict(true, {"net.0.weight"});
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->raise);
  EXPECT_EQ(e->facts.finding.call, "Torch.sqrt.1.backward");
}

// stop_level "medium" makes the watch stop on an absorbed call: then it is no absorbed anomaly
// (told in one line) but the step's overflow, with on_overflow before the raise.
TEST_F(Decisions, AnAbsorbedFindingThatStopsIsAnOverflow) {
  OverflowDecisions d(options);
  const CallDecision c =
      on(d, verdict("Torch.nan_to_num.0.forward", Judgement::Absorbed, true, true, Origin::Input));
  ASSERT_TRUE(c.event);
  EXPECT_TRUE(c.event->notify);
  EXPECT_TRUE(c.event->raise);
  EXPECT_FALSE(c.tell_absorbed);
  EXPECT_EQ(d.absorbed_line(), "");
  ASSERT_TRUE(d.first_anomaly());
  EXPECT_EQ(d.first_anomaly()->finding.call, "Torch.nan_to_num.0.forward");
}

// Only backward findings are the loss scaler's to skip: a forward one in a scaled step is told at
// once, whether or not it stops, and step() has nothing left to say about it.
TEST_F(Decisions, AScaledStepsForwardFindingIsToldAtOnce) {
  options.action = Action::Continue;
  OverflowDecisions d(options);
  d.set_loss_scaled();
  Verdict v = op_origin("Torch.log.0.forward");
  v.stop = false;  // action continue
  const CallDecision c = on(d, v);
  ASSERT_TRUE(c.event);
  EXPECT_TRUE(c.event->notify);
  EXPECT_FALSE(c.event->raise);
  EXPECT_EQ(c.event->facts.finding.call, "Torch.log.0.forward");
  EXPECT_FALSE(d.loss_scale(1024, 1024, false, 0, OverflowFacts{}).event);
}

// "below min_loss_scale" (docs/overflow-detection.md): a scale that fell to exactly the minimum
// is a skipped step like any other drop, not a stop.
TEST_F(Decisions, AScaleThatFellToExactlyMinLossScaleIsASkippedStep) {
  options.min_loss_scale = 128;
  OverflowDecisions d(options);
  const ScaleDecision at = d.loss_scale(256, 128, false, 4, OverflowFacts{});
  EXPECT_FALSE(at.event);
  EXPECT_EQ(at.say,
            "msprobe_cpp: step 4: gradients overflowed at scale 256; the loss scaler skipped the "
            "step");
  d.new_step();
  const ScaleDecision below = d.loss_scale(128, 64, false, 5, OverflowFacts{});
  ASSERT_TRUE(below.event);
  EXPECT_TRUE(below.event->raise);
}

TEST_F(Decisions, ACleanStepIsNotWritten) {
  OverflowDecisions d(options);
  EXPECT_FALSE(d.dump_step(false, false, 0).dump);
}

TEST_F(Decisions, OverflowNumsBoundsTheWrittenStepsAndSaysSoOnce) {
  options.overflow_nums = 2;
  OverflowDecisions d(options);
  for (int64_t step = 0; step < 2; ++step) {
    EXPECT_TRUE(d.budget_left());
    EXPECT_TRUE(d.dump_step(true, false, step).dump);
    EXPECT_TRUE(d.dump_step(true, false, step).dump);  // the same step again: counted once
    d.new_step();
  }
  EXPECT_FALSE(d.budget_left());
  const CallDecision c = on(d, op_origin("Torch.log.0.forward"));
  EXPECT_TRUE(c.event && c.event->raise);  // detection and stops go on
  EXPECT_FALSE(c.keep_tensors);            // but nothing is kept for a dump that will not come
  const DumpDecision third = d.dump_step(true, false, 2);
  EXPECT_FALSE(third.dump);
  EXPECT_EQ(third.say,
            "msprobe_cpp: step 2 flagged; overflow_nums (2) reached: no more dumps are written, "
            "detection goes on");
  d.new_step();
  EXPECT_EQ(d.dump_step(true, false, 3).say, "");  // said once
}

TEST_F(Decisions, UnlimitedOverflowNums) {
  options.overflow_nums = -1;
  OverflowDecisions d(options);
  for (int64_t step = 0; step < 5; ++step) {
    EXPECT_TRUE(d.dump_step(true, false, step).dump);
    d.new_step();
  }
}

TEST_F(Decisions, APeerStopIsAlwaysWritten) {
  options.overflow_nums = 0;
  OverflowDecisions d(options);
  EXPECT_TRUE(d.dump_step(false, true, 0).dump);
}

TEST_F(Decisions, SourcesAndLaterCallsFillTheKeptFactsOfTheirCall) {
  OverflowDecisions d(options);
  on(d, op_origin("Torch.log.0.forward"));
  d.set_source("Torch.exp.0.forward", std::string("other.py:1: y = x.exp()"));
  ASSERT_TRUE(d.first_anomaly());
  EXPECT_FALSE(d.first_anomaly()->source);
  d.set_source("Torch.log.0.forward", std::string("train.py:9: y = x.log()"));
  d.set_source("Torch.log.0.forward", std::string("ignored: the first source stays"));
  EXPECT_EQ(d.first_anomaly()->source, "train.py:9: y = x.log()");
}

// A stop's late facts reach its kept facts in one step, as its step is written (issue 54: one
// lock for them with the step's end).
TEST_F(Decisions, AStopsLateFactsCompleteItsKeptFacts) {
  OverflowDecisions d(options);
  on(d, op_origin("Torch.log.0.forward"));
  OverflowFacts stop = *d.first_anomaly();
  stop.source = "train.py:9: y = x.log()";
  stop.raised_calls_later = 12;
  ReplayFacts wider;
  wider.verdict = "replay in float32: finite";
  stop.replay.tried = true;
  stop.replay.verdicts = {wider};
  OverflowFacts other = stop;
  other.finding.call = "Torch.exp.0.forward";
  other.raised_calls_later = 3;
  d.complete(other);  // another call's: nothing of it is taken
  EXPECT_FALSE(d.first_anomaly()->source);
  EXPECT_EQ(d.first_anomaly()->raised_calls_later, 0);
  d.complete(stop);
  EXPECT_EQ(d.first_anomaly()->source, "train.py:9: y = x.log()");
  EXPECT_EQ(d.first_anomaly()->raised_calls_later, 12);
  ASSERT_EQ(d.first_anomaly()->replay.verdicts.size(), 1u);
  EXPECT_EQ(d.first_anomaly()->replay.verdicts[0].verdict, wider.verdict);
}

TEST_F(Decisions, TheStepsFirstAbsorbedLineIsItsFacts) {
  OverflowDecisions d(options);
  EXPECT_EQ(d.absorbed_line(), "");
  on(d, verdict("Torch.nan_to_num.0.forward", Judgement::Absorbed, true, false, Origin::Input));
  EXPECT_NE(d.absorbed_line().find("Torch.nan_to_num.0.forward"), std::string::npos);
}

// The damage rule: a held origin is no event; caught later, the event is the held origin's
// facts with where it was caught; never caught, it is absorbed at the end of the step, told once.
TEST_F(Decisions, AHeldOriginIsToldOnlyWhenCaughtOrAbsorbed) {
  OverflowDecisions d(options);
  Verdict hold = op_origin("Torch.log.0.forward");
  hold.stop = false;
  hold.hold = true;
  const CallDecision held = on(d, hold);
  EXPECT_FALSE(held.event);
  EXPECT_TRUE(held.keep_tensors);  // the origin's tensors are the evidence either way
  Verdict caught = verdict("Tensor.__add__.1.forward", Judgement::Flagged, true, true, Origin::Op);
  caught.caught = 0;
  caught.caught_how = "entered a tensor that requires grad";
  const CallDecision c = on(d, caught);
  ASSERT_TRUE(c.event);
  EXPECT_TRUE(c.event->raise && c.event->notify);
  EXPECT_EQ(c.event->facts.finding.call, "Torch.log.0.forward");
  EXPECT_EQ(c.event->facts.caught.call, "Tensor.__add__.1.forward");
  EXPECT_TRUE(c.event->facts.held);
  EXPECT_TRUE(d.finish_held({HeldEnd{}}).empty());  // caught: nothing absorbed

  d.new_step();
  on(d, hold);
  const std::vector<std::string> lines = d.finish_held({HeldEnd{"", "Tensor.long.0.forward"}});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("made by Torch.log.0.forward"), std::string::npos);
  EXPECT_NE(lines[0].find("turned finite by Tensor.long.0.forward"), std::string::npos);
  EXPECT_TRUE(d.finish_held({HeldEnd{}}).empty());  // told once
  ASSERT_TRUE(d.first_anomaly());
  EXPECT_TRUE(d.first_anomaly()->absorbed && d.first_anomaly()->held);
}

// Issue 43: held NaN/inf still in a tensor at the end of the step (a metric) did no damage but
// was never absorbed: said so, with the call whose output holds it, and not called absorbed.
TEST_F(Decisions, AHeldOriginStillHeldAtTheEndIsNotCalledAbsorbed) {
  OverflowDecisions d(options);
  Verdict hold = op_origin("Tensor.__mul__.1.forward");
  hold.stop = false;
  hold.hold = true;
  on(d, hold);
  const std::vector<std::string> lines =
      d.finish_held({HeldEnd{"Tensor.sum.0.forward", "Tensor.long.0.forward"}});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].find("absorbed"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("still held at the end of the step, in the output of "
                          "Tensor.sum.0.forward"),
            std::string::npos)
      << lines[0];
  ASSERT_TRUE(d.first_anomaly());
  EXPECT_FALSE(d.first_anomaly()->absorbed);
  EXPECT_TRUE(d.dump_step(true, false, 0).dump);
}

// Issue 43: NaN/inf in an optimizer's state stops before the step, origin parameter, naming the
// state and its parameter.
TEST_F(Decisions, OptimizerStateWithNanStopsNamingTheStateAndItsParameter) {
  OverflowDecisions d(options);
  const std::optional<OverflowEvent> e =
      d.optimizer_before_step(state_look("exp_avg_sq", "fc1.weight", 2), "SGD",
                              OverflowFacts{});
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->raise && e->notify);
  EXPECT_EQ(e->facts.origin, Origin::Parameter);
  EXPECT_EQ(e->facts.parameter, "fc1.weight");
  EXPECT_EQ(e->facts.optimizer_state, "exp_avg_sq");
  const std::string m = e->facts.message();
  EXPECT_NE(m.find("came in with the optimizer's state: exp_avg_sq of parameter fc1.weight"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find("the batch?"), std::string::npos) << m;
  EXPECT_TRUE(d.dump_step(false, false, 0).dump);
}

// Issue 47: what an optimizer's step wrote, its calls not judged one by one: origin op, the first
// tensor named, raised as stop_on says; nothing when the step's origin was told already.
TEST_F(Decisions, AnOptimizerUpdateThatWroteNanStopsAsAnOpNamingTheParameter) {
  OverflowDecisions d(options);
  EXPECT_FALSE(d.step_flagged());
  const std::optional<OverflowEvent> e = d.optimizer_update(
      {"fc1.weight", "exp_avg of fc1.weight"}, "AdamW", OverflowFacts{});
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->raise && e->notify);
  EXPECT_TRUE(d.step_flagged());
  EXPECT_EQ(e->facts.origin, Origin::Op);
  EXPECT_EQ(e->facts.finding.scene, Scene::InputNormalOutputAnomaly);
  EXPECT_EQ(e->facts.parameter, "fc1.weight");
  EXPECT_NE(e->facts.note.find("AdamW.step wrote NaN/inf into fc1.weight and 1 more"),
            std::string::npos)
      << e->facts.note;
  EXPECT_TRUE(d.dump_step(false, false, 0).dump);

  OverflowDecisions told(options);
  ASSERT_TRUE(told.optimizer_before_step(state_look("exp_avg_sq", "fc1.weight", 0), "SGD",
                                         OverflowFacts{}));
  EXPECT_FALSE(told.optimizer_update({"fc1.weight"}, "AdamW", OverflowFacts{}));

  OverflowSection no_op = options;
  no_op.stop_on = {Origin::Input};
  OverflowDecisions quiet(no_op);
  const auto kept = quiet.optimizer_update({"w"}, "SGD", OverflowFacts{});
  ASSERT_TRUE(kept.has_value());
  EXPECT_FALSE(kept->raise);
  EXPECT_TRUE(kept->notify);
}

// Issue 43: the "left by an earlier step" advice only where an earlier step left gradients.
TEST_F(Decisions, TheEarlierStepNoteNeedsAnEarlierStepThatLeftGradients) {
  OverflowDecisions::GradientSource first;
  OverflowDecisions d(options);
  auto e = d.optimizer_gradients({"fc.weight"}, first, OverflowFacts{});
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->facts.note.find("earlier step"), std::string::npos) << e->facts.note;
  EXPECT_EQ(e->facts.origin, Origin::Op);
  d.new_step();
  OverflowDecisions::GradientSource later;
  later.earlier_step_left = true;
  e = d.optimizer_gradients({"fc.weight"}, later, OverflowFacts{});
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->facts.note.find("left by an earlier step"), std::string::npos) << e->facts.note;
  EXPECT_EQ(e->facts.origin, Origin::Input);
}

// A step flagged by absorbed NaN/inf alone is written without using up overflow_nums, so the dump
// of a real stop later is not lost to it.
TEST_F(Decisions, AnAbsorbedStepDoesNotUseUpOverflowNums) {
  options.overflow_nums = 1;
  OverflowDecisions d(options);
  Verdict hold = op_origin("Torch.log.0.forward");
  hold.stop = false;
  hold.hold = true;
  on(d, hold);
  d.finish_held({HeldEnd{}});
  EXPECT_TRUE(d.dump_step(true, false, 0).dump);
  d.new_step();
  EXPECT_TRUE(d.budget_left());
  on(d, op_origin("Torch.exp.0.forward"));
  EXPECT_TRUE(d.dump_step(true, false, 1).dump);
  d.new_step();
  EXPECT_FALSE(d.budget_left());
}

// Issue 42: a stop found only by the optimizer-step gate names a dump folder; the step must then
// be written although no judged call flagged it.
TEST_F(Decisions, AnOptimizerGateStopDumpsItsStep) {
  OverflowDecisions d(options);
  d.new_step();
  const std::optional<OverflowEvent> e = d.optimizer_gradients(
      {"fc.weight"}, OverflowDecisions::GradientSource{}, OverflowFacts{});
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->raise);
  EXPECT_TRUE(d.dump_step(false, false, 0).dump);
}

TEST_F(Decisions, AStepWithNothingToldIsNotDumped) {
  OverflowDecisions d(options);
  d.new_step();
  EXPECT_FALSE(d.dump_step(false, false, 0).dump);
}

// Issue 42: a backward op origin whose NaN/inf goes into a collective (FSDP's reduce-scatter)
// stops there, not at the end of a pass that the other ranks will never let end.
TEST_F(Decisions, ABackwardOriginThatFeedsACollectiveStopsThere) {
  OverflowDecisions d(options);
  d.new_step();
  on(d, backward_op("Torch.sqrt.0.backward"), true);
  Verdict fed = downstream("Distributed.reduce_scatter_tensor.0.forward");
  fed.finding->input_indices = {1};
  const CallDecision c = on(d, fed);
  ASSERT_TRUE(c.event.has_value());
  EXPECT_TRUE(c.event->raise);
  EXPECT_EQ(c.event->facts.finding.call, "Torch.sqrt.0.backward");
  EXPECT_EQ(c.event->facts.caught.call, "Distributed.reduce_scatter_tensor.0.forward");
  EXPECT_FALSE(d.backward_pass_ended());  // told already
}

TEST_F(Decisions, AScaledStepsGradientsGoIntoTheAllReduceWithoutAStop) {
  OverflowDecisions d(options);
  d.new_step();
  d.set_loss_scaled();
  on(d, backward_op("Torch.sqrt.0.backward"), true);
  Verdict fed = downstream("Distributed.all_reduce.0.forward");
  fed.finding->input_indices = {0};
  const CallDecision c = on(d, fed);
  EXPECT_FALSE(c.event.has_value() && c.event->raise);
  EXPECT_TRUE(d.backward_pass_ended());  // still waits for its pass, and the scaler
}

}  // namespace
}  // namespace msprobe
