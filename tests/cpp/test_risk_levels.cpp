#include "core/risk_levels.h"

#include <gtest/gtest.h>

namespace msprobe {
namespace {

Config config(Generation g, Task task, Level level, RiskLevel risk = RiskLevel::Core) {
  Config c;
  c.generation = g;
  c.task = task;
  c.level = level;
  c.msprobe26.risk_level = risk;
  return c;
}

TEST(RiskLevelsTest, CoreApisWhateverTheirPrefixAndDirection) {
  EXPECT_EQ(api_risk("Functional.linear.0.forward"), ApiRisk::Focus);  // 26.2.0's missing comma
  EXPECT_EQ(api_risk("Functional.conv2d.0.forward"), ApiRisk::Core);
  EXPECT_EQ(api_risk("Tensor.__matmul__.3.backward"), ApiRisk::Core);
  EXPECT_EQ(api_risk("Torch.matmul.12.forward"), ApiRisk::Core);
  EXPECT_EQ(api_risk("Distributed.all_reduce.0.forward"), ApiRisk::Core);
  EXPECT_EQ(api_risk("Torch.linalg.matmul.0.forward"), ApiRisk::Core);  // 1.1.x's dotted name
  EXPECT_EQ(api_risk("Torch.scaled_dot_product_attention.0.forward"), ApiRisk::Core);
}

TEST(RiskLevelsTest, LowRiskApisAreReshapesCastsAndCopies) {
  EXPECT_EQ(api_risk("Tensor.view.0.forward"), ApiRisk::Low);
  EXPECT_EQ(api_risk("Tensor.half.1.forward"), ApiRisk::Low);
  EXPECT_EQ(api_risk("Torch.cat.0.backward"), ApiRisk::Low);
  EXPECT_EQ(api_risk("Tensor.__bool__.0.forward"), ApiRisk::Low);
  EXPECT_EQ(api_risk("Torch.zeros_like.4.forward"), ApiRisk::Low);
}

TEST(RiskLevelsTest, EverythingElseIsFocus) {
  EXPECT_EQ(api_risk("Tensor.add.0.forward"), ApiRisk::Focus);
  EXPECT_EQ(api_risk("Functional.softmax.0.forward"), ApiRisk::Focus);
  EXPECT_EQ(api_risk("Tensor.views.0.forward"), ApiRisk::Focus);  // not a prefix match
  EXPECT_EQ(api_risk("Torch.mat.0.forward"), ApiRisk::Focus);
  EXPECT_EQ(api_risk(""), ApiRisk::Focus);
}

TEST(RiskLevelsTest, NamesWithoutCounterOrDirectionNameTheApiAfterThePrefix) {
  EXPECT_EQ(api_risk("Torch.matmul"), ApiRisk::Core);
  EXPECT_EQ(api_risk("Tensor.view"), ApiRisk::Low);
  EXPECT_EQ(api_risk("matmul"), ApiRisk::Core);
  EXPECT_EQ(api_risk(".forward"), ApiRisk::Focus);
}

TEST(RiskLevelsTest, KeptAtEachLevel) {
  for (const char* name : {"Torch.matmul.0.forward", "Tensor.add.0.forward",
                           "Tensor.view.0.forward"}) {
    EXPECT_TRUE(kept_at_risk_level(name, RiskLevel::All)) << name;
  }
  EXPECT_TRUE(kept_at_risk_level("Torch.matmul.0.forward", RiskLevel::Focus));
  EXPECT_TRUE(kept_at_risk_level("Tensor.add.0.forward", RiskLevel::Focus));
  EXPECT_FALSE(kept_at_risk_level("Tensor.view.0.forward", RiskLevel::Focus));
  EXPECT_TRUE(kept_at_risk_level("Torch.matmul.0.forward", RiskLevel::Core));
  EXPECT_FALSE(kept_at_risk_level("Tensor.add.0.forward", RiskLevel::Core));
  EXPECT_FALSE(kept_at_risk_level("Tensor.view.0.forward", RiskLevel::Core));
}

TEST(RiskLevelsTest, ModuleCallsAreAlwaysKept) {
  EXPECT_TRUE(kept_at_risk_level("Module.fc.Linear.forward.0", RiskLevel::Core));
  EXPECT_TRUE(kept_at_risk_level("Module.view.View.forward.0", RiskLevel::Focus));
  // Only the "Module." prefix counts, not a name that holds the word.
  EXPECT_FALSE(kept_at_risk_level("Tensor.Module.0.forward", RiskLevel::Core));
}

TEST(RiskLevelsTest, The26RiskLevelAppliesToDumpsAtL1AndMix) {
  for (Task t : {Task::Statistics, Task::Tensor, Task::Structure}) {
    for (Level l : {Level::L1, Level::Mix}) {
      EXPECT_EQ(effective_risk_level(config(Generation::V26, t, l, RiskLevel::Core)),
                RiskLevel::Core);
    }
  }
  EXPECT_EQ(effective_risk_level(config(Generation::V26, Task::Tensor, Level::L1,
                                        RiskLevel::Focus)),
            RiskLevel::Focus);
}

TEST(RiskLevelsTest, EverythingElseFiltersNothing) {
  EXPECT_EQ(effective_risk_level(config(Generation::V1_1, Task::Statistics, Level::L1)),
            RiskLevel::All);
  EXPECT_EQ(effective_risk_level(config(Generation::V26, Task::Statistics, Level::L0)),
            RiskLevel::All);
  EXPECT_EQ(effective_risk_level(config(Generation::V26, Task::Statistics, Level::Debug)),
            RiskLevel::All);
  EXPECT_EQ(effective_risk_level(config(Generation::V26, Task::OverflowCheck, Level::L1)),
            RiskLevel::All);
  EXPECT_EQ(effective_risk_level(config(Generation::V26, Task::FreeBenchmark, Level::L1)),
            RiskLevel::All);
}

}  // namespace
}  // namespace msprobe
