// Headroom of 16-bit call sites: when a site is said, what its history keeps, and how a stop reads
// the trend.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/headroom.h"
#include "core/overflow_facts.h"

namespace msprobe {
namespace {

const HeadroomSite kSite{"Tensor.__mul__", 1};
const HeadroomSite kOther{"Tensor.__mul__", 2};  // the same API on another line

TEST(Headroom, SaidOnceWhenTheThresholdIsReached) {
  Headroom h(0.5);
  EXPECT_FALSE(h.observe(kSite, 0, "torch.float16", 30000.0));
  auto said = h.observe(kSite, 1, "torch.float16", 33000.0);
  ASSERT_TRUE(said);
  EXPECT_NEAR(said->history.back().fraction, 33000.0 / 65504.0, 1e-12);
  EXPECT_FALSE(h.observe(kSite, 2, "torch.float16", 60000.0));  // once for the run
  EXPECT_TRUE(h.observe(kOther, 2, "torch.float16", 40000.0));  // each site for itself
  EXPECT_EQ(h.warned().size(), 2u);
}

TEST(Headroom, OffAtZeroAndSilentForOtherDtypesAndNonFiniteValues) {
  Headroom off(0.0);
  EXPECT_FALSE(off.observe(kSite, 0, "torch.float16", 65000.0));
  EXPECT_FALSE(off.trend(kSite, 1));
  Headroom h(0.5);
  EXPECT_FALSE(h.observe(kSite, 0, "torch.float32", 3e38));
  EXPECT_FALSE(h.observe(kSite, 0, "torch.float16", INFINITY));
  EXPECT_FALSE(h.trend(kSite, 1));
  EXPECT_TRUE(h.observe(kSite, 0, "torch.bfloat16", 2e38));
}

TEST(Headroom, KeepsTheLargestOfEachOfTheLastEightSteps) {
  Headroom h(0.9);
  for (int64_t step = 0; step < 12; ++step) {
    h.observe(kSite, step, "torch.float16", 100.0 * (step + 1));
    h.observe(kSite, step, "torch.float16", 50.0);  // a smaller value in the same step
  }
  auto t = h.trend(kSite, 12);
  ASSERT_TRUE(t);
  ASSERT_EQ(t->history.size(), kHeadroomSteps);
  EXPECT_EQ(t->history.front().step, 4);
  EXPECT_EQ(t->history.back().magnitude, 1200.0);
}

TEST(Headroom, SteadyGrowthAndAJump) {
  Headroom h(0.5);
  for (int64_t step = 0; step < 6; ++step) {
    h.observe(kSite, step, "torch.float16", 6550.0 * std::pow(1.5, step));
  }
  auto steady = h.trend(kSite, 6);
  ASSERT_TRUE(steady);
  EXPECT_EQ(steady->text,
            "grew steadily: x1.50 a step, a doubling every 1.7 steps, to 76% of float16's range "
            "(divergence, learning rate or loss scale)");
  for (int64_t step = 0; step < 4; ++step) h.observe(kOther, step, "torch.float16", 3300.0);
  auto jump = h.trend(kOther, 4);
  ASSERT_TRUE(jump);
  EXPECT_EQ(jump->text,
            "jumped in one step: from 5% of float16's range at step 3 to overflow (what changed in "
            "that step: its data, the learning rate, or the update before it)");
  EXPECT_TRUE(jump->jumped);  // from 5%: four doublings or more in one step
  EXPECT_FALSE(steady->jumped);
  // Growing, but far too slowly to have overflowed now: a jump on top of the growth.
  Headroom slow(0.5);
  for (int64_t step = 0; step < 4; ++step) {
    slow.observe(kSite, step, "torch.float16", 100.0 * std::pow(1.1, step));
  }
  EXPECT_EQ(slow.trend(kSite, 4)->text.rfind("jumped in one step", 0), 0u);
}

// "When a site first reaches" the threshold: exactly the threshold is reached.
TEST(Headroom, ExactlyTheThresholdIsReached) {
  Headroom h(0.5);
  EXPECT_FALSE(h.observe(kSite, 0, "torch.float16", 32751.0));
  auto said = h.observe(kSite, 1, "torch.float16", 32752.0);  // 65504 / 2
  ASSERT_TRUE(said);
  EXPECT_EQ(said->history.back().fraction, 0.5);
}

// The history of `magnitudes`, one step each from step 0.
Headroom history(const std::vector<double>& magnitudes) {
  Headroom h(0.99);
  for (size_t i = 0; i < magnitudes.size(); ++i) {
    h.observe(kSite, static_cast<int64_t>(i), "torch.float16", magnitudes[i]);
  }
  return h;
}

// Steady means at least x1.05 every step: x1.05 is; x1.04 is not, though at that rate the 92% of
// the last step would have overflowed in time for the stop.
TEST(Headroom, SteadyGrowthIsAtLeastFivePercentAStep) {
  for (double growth : {1.04, 1.05}) {
    std::vector<double> m = {60000.0 / std::pow(growth, 3)};
    for (int i = 0; i < 3; ++i) m.push_back(m.back() * growth);
    const std::string text = history(m).trend(kSite, 4)->text;
    EXPECT_EQ(text.rfind(growth == 1.05 ? "grew steadily: x1.05 a step" : "jumped in one step", 0),
              0u)
        << growth << ": " << text;
  }
}

// Steady growth explains a stop when, at its rate, the last step's share would have reached the
// range within twice the steps since, plus one. At x1.5 a step, 36% of the range needs 2.5 steps
// more and 25% needs 3.4: a stop one step later is growth after the first and a jump after the
// second; two steps later both are growth.
TEST(Headroom, GrowthExplainsAStopOnlyIfItCouldHaveOverflowedByThen) {
  auto from = [](double fraction) {
    std::vector<double> m;
    for (int i = 0; i < 4; ++i) m.push_back(fraction * 65504.0 / std::pow(1.5, 3 - i));
    return history(m);
  };
  EXPECT_EQ(from(0.36).trend(kSite, 4)->text.rfind("grew steadily: x1.50 a step", 0), 0u);
  EXPECT_EQ(from(0.25).trend(kSite, 4)->text.rfind("jumped in one step", 0), 0u);
  EXPECT_FALSE(from(0.25).trend(kSite, 4)->jumped);  // two doublings: no jump of the inputs
  EXPECT_EQ(from(0.25).trend(kSite, 5)->text.rfind("grew steadily: x1.50 a step", 0), 0u);
}

TEST(Headroom, TheWarningLine) {
  HeadroomRecord r;
  r.dtype = "torch.float16";
  r.history = {{7, 34102.0 / 65504.0, 34102.0}};
  EXPECT_EQ(headroom_warning(headroom_where("Tensor.__mul__", "blocks.2.attn", "train.py:50"), r),
            "msprobe_cpp: step 7: Tensor.__mul__ in blocks.2.attn (train.py:50) reached 52% of "
            "float16's range (max 34102); it overflows if it doubles");
  r.history = {{3, 0.2, 13100.8}};
  EXPECT_EQ(headroom_warning(headroom_where("Torch.exp", "", ""), r),
            "msprobe_cpp: step 3: Torch.exp reached 20% of float16's range (max 13100.8); it "
            "overflows if it grows 5x");
}

}  // namespace
// Issue 43: a replay finite in a wider dtype advises keeping the op there, unless the call's
// history jumped: then its inputs changed since the last step, and the advice says so.
TEST(Headroom, AJumpedHistoryTurnsTheWiderReplayAdviceToWhatChanged) {
  OverflowFacts facts;
  ReplayFacts r;
  r.kind = "wider";
  r.finite = true;
  r.verdict =
      "replay in float32: finite (max 1.8e+09 > float16 max 65504): the values exceed float16; "
      "keep this op in float32 or scale its inputs";
  facts.replay.verdicts = {r};
  fit_replay_advice(facts);
  EXPECT_EQ(facts.replay.verdicts[0].verdict, r.verdict);  // no history: as the replay said
  Headroom h(0.5);
  for (int64_t step = 0; step < 3; ++step) h.observe(kSite, step, "torch.float16", 600.0);
  facts.history = h.trend(kSite, 3);
  fit_replay_advice(facts);
  EXPECT_EQ(facts.replay.verdicts[0].verdict.find("keep this op"), std::string::npos);
  EXPECT_NE(facts.replay.verdicts[0].verdict.find("jumped since the last step"), std::string::npos);
  EXPECT_NE(facts.replay.verdicts[0].verdict.find("the learning rate"), std::string::npos);
}

}  // namespace msprobe
