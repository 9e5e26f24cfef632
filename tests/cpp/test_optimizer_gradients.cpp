// The last gate before an optimizer writes the gradients (issue 32): where non-finite gradients
// that no finding of the step told of came from, and when a finding told already stops there.
#include <gtest/gtest.h>

#include "core/overflow_decisions.h"

namespace msprobe {
namespace {

OverflowFacts optimizer_step_facts() {
  OverflowFacts f;
  f.finding.call = "(before SGD.step)";
  return f;
}

// `earlier_step_left`: an earlier step of the debugger left gradients (stale ones are possible).
std::optional<OverflowEvent> judge(OverflowDecisions& d, std::vector<std::string> bad, bool reduced,
                                   bool compiled = false, bool earlier_step_left = true) {
  OverflowDecisions::GradientSource source;
  source.reduced = reduced;
  source.compiled = compiled;
  source.earlier_step_left = earlier_step_left;
  return d.optimizer_gradients(std::move(bad), source, optimizer_step_facts());
}

TEST(OptimizerGradients, AveragedAcrossRanksTheyAreAPeersAndStop) {
  OverflowSection options;
  OverflowDecisions d(options);
  auto e = judge(d, {"fc.weight", "fc.bias"}, true);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->raise);
  EXPECT_TRUE(e->notify);
  EXPECT_EQ(e->facts.origin, Origin::Peer);
  EXPECT_EQ(e->facts.finding.call, "(before SGD.step)");
  EXPECT_EQ(e->facts.gradients.parameters, (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_NE(e->facts.note.find("the gradients of fc.weight and 1 more, averaged across the ranks"),
            std::string::npos)
      << e->facts.note;
  ASSERT_TRUE(d.first_anomaly());
  EXPECT_EQ(d.first_anomaly()->origin, Origin::Peer);
}

TEST(OptimizerGradients, InOneProcessACompiledBackwardIsAnOpElseAnEarlierStepsInput) {
  OverflowSection options;
  OverflowDecisions compiled(options);
  auto c = judge(compiled, {"w"}, false, true);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->facts.origin, Origin::Op);
  EXPECT_NE(c->facts.note.find("compiled region"), std::string::npos);
  OverflowDecisions stale(options);
  auto s = judge(stale, {"w"}, false);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->facts.origin, Origin::Input);
  EXPECT_NE(s->facts.note.find("left by an earlier step (zero them with optimizer.zero_grad())"),
            std::string::npos);
}

TEST(OptimizerGradients, AnOriginKindNotInStopOnOrActionContinueFlagsWithoutAStop) {
  OverflowSection only_op;
  only_op.stop_on = {Origin::Op};
  OverflowDecisions d(only_op);
  auto e = judge(d, {"w"}, true);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->notify);
  EXPECT_FALSE(e->raise);
  OverflowSection go_on;
  go_on.action = Action::Continue;
  OverflowDecisions c(go_on);
  auto f = judge(c, {"w"}, false);
  ASSERT_TRUE(f);
  EXPECT_FALSE(f->raise);
}

TEST(OptimizerGradients, AFindingToldAlreadyIsNotToldAgain) {
  OverflowSection options;
  options.action = Action::Continue;
  OverflowDecisions d(options);
  ASSERT_TRUE(judge(d, {"w"}, false));
  EXPECT_FALSE(judge(d, {"w"}, false));  // the step's story is told once
}

OverflowFacts linear_backward_facts() {
  OverflowFacts f;
  f.finding.call = "Functional.linear.0.backward";
  return f;
}

TEST(OptimizerGradients, AfterCallsFlaggedWithoutAnOriginTheGradientsStillStop) {
  OverflowSection options;
  OverflowDecisions d(options);
  Verdict v;  // a backward record fed NaN by an unrecorded backward: high, no origin
  v.finding = Finding{};
  v.finding->call = "Functional.linear.0.backward";
  v.judgement = Judgement::Flagged;
  v.flagged = true;
  const CallDecision c = d.on_call(v, true, linear_backward_facts());
  ASSERT_TRUE(c.event);
  EXPECT_FALSE(c.event->raise);
  auto e = judge(d, {"fc.weight"}, false);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->raise);
  EXPECT_FALSE(e->notify);  // the step was told of already
  EXPECT_EQ(e->facts.finding.call, "(before SGD.step)");
  EXPECT_EQ(e->facts.origin, Origin::Input);
}

TEST(OptimizerGradients, AScaledStepTheOptimizerStepsWithWasNotSkippedAndStops) {
  OverflowSection options;
  OverflowDecisions d(options);
  d.set_loss_scaled();
  Verdict v;
  v.finding = Finding{};
  v.finding->call = "Functional.linear.0.backward";
  v.judgement = Judgement::Flagged;
  v.flagged = true;
  d.on_call(v, true, linear_backward_facts());
  auto e = judge(d, {"fc.weight"}, false);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->raise);
  EXPECT_EQ(e->facts.finding.call, "Functional.linear.0.backward");
  EXPECT_NE(e->facts.note.find("the loss scaler did not skip the step"), std::string::npos);
}

}  // namespace
}  // namespace msprobe
