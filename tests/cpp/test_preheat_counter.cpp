// free_benchmark's preheat: msprobe 1.1.1's sampling and threshold moves, with the figures its own
// run gave (docs/decisions.md).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/preheat_counter.h"

using namespace msprobe;

namespace {

// The calls of `step` that are samples, out of `calls` made in it.
std::vector<int> samples(PreheatCounter& p, const std::string& api, int64_t step, int calls) {
  std::vector<int> out;
  for (int seq = 1; seq <= calls; ++seq)
    if (p.sampled(api, step)) out.push_back(seq);
  return out;
}

}  // namespace

TEST(PreheatCounter, Step0CountsOnly) {
  PreheatCounter p(3, 2, PertMode::ImprovePrecision);
  EXPECT_TRUE(p.counting("Torch.exp", 0));
  EXPECT_FALSE(p.counting("Torch.exp", 1));
  EXPECT_DOUBLE_EQ(p.threshold("Torch.exp", "torch.float16"), 2.05);
}

TEST(PreheatCounter, SamplesAsMsprobe) {
  // 5 calls in step 0, preheat_step 3, max_sample 2: step 1 samples calls 1 and 4, step 2 calls 2
  // and 5 (msprobe's run: Torch.exp.0 and Torch.exp.3, then .1 and .4).
  PreheatCounter p(3, 2, PertMode::ImprovePrecision);
  for (int i = 0; i < 5; ++i) p.counting("Torch.exp", 0);
  EXPECT_EQ(samples(p, "Torch.exp", 1, 5), (std::vector<int>{1, 4}));
  EXPECT_EQ(samples(p, "Torch.exp", 2, 5), (std::vector<int>{2, 5}));
  EXPECT_TRUE(samples(p, "Torch.exp", 3, 5).empty());  // preheat is over: thresholds kept
  EXPECT_TRUE(samples(p, "Torch.sin", 1, 5).empty());  // never called in step 0
}

TEST(PreheatCounter, MovesThresholdsAsMsprobe) {
  PreheatCounter p(3, 2, PertMode::ImprovePrecision);
  for (int i = 0; i < 5; ++i) p.counting("Torch.exp", 0);
  samples(p, "Torch.exp", 1, 1);
  // Every sample agreed with the CPU, one above the threshold: it doubles its distance to 1.
  p.record("Torch.exp", "torch.float16", 2.1015625, true);
  EXPECT_DOUBLE_EQ(p.threshold("Torch.exp", "torch.float16"), 2.05);  // one sample of two so far
  p.record("Torch.exp", "torch.float16", 1.064453125, true);
  EXPECT_DOUBLE_EQ(p.threshold("Torch.exp", "torch.float16"), 3.0999999999999996);
  // Next step, all agreeing and below it: halves the distance.
  samples(p, "Torch.exp", 2, 1);
  p.record("Torch.exp", "torch.float16", 1.51, true);
  p.record("Torch.exp", "torch.float16", 2.318, true);
  EXPECT_DOUBLE_EQ(p.threshold("Torch.exp", "torch.float16"), 2.05);
}

TEST(PreheatCounter, DisagreementSettlesTheThreshold) {
  PreheatCounter p(3, 2, PertMode::ImprovePrecision);
  for (int i = 0; i < 4; ++i) p.counting("Torch.sum", 0);
  samples(p, "Torch.sum", 1, 1);
  p.record("Torch.sum", "torch.float16", 1.3, true);
  p.record("Torch.sum", "torch.float16", 1.8, false);  // separates: the lowest bad ratio
  EXPECT_DOUBLE_EQ(p.threshold("Torch.sum", "torch.float16"), 1.8);
  samples(p, "Torch.sum", 2, 1);
  p.record("Torch.sum", "torch.float16", 1.01, true);
  p.record("Torch.sum", "torch.float16", 1.02, true);
  EXPECT_DOUBLE_EQ(p.threshold("Torch.sum", "torch.float16"), 1.8);  // settled: no longer moved
  // Never below the dtype's own threshold.
  PreheatCounter q(3, 2, PertMode::ImprovePrecision);
  for (int i = 0; i < 2; ++i) q.counting("Torch.mm", 0);
  samples(q, "Torch.mm", 1, 1);
  q.record("Torch.mm", "torch.bfloat16", 1.0001, false);
  EXPECT_DOUBLE_EQ(q.threshold("Torch.mm", "torch.bfloat16"), 1.004);
}
