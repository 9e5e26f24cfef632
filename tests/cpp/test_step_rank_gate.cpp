#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/config.h"
#include "core/step_rank_gate.h"

using namespace msprobe;

namespace {

const nlohmann::json kAll = nlohmann::json::array();  // an empty list: every step, every rank

Config config_of(const std::string& task, const nlohmann::json& step,
                 const nlohmann::json& rank) {
  return parse_config(
      {{"task", task}, {"dump_path", "/tmp/d"}, {"step", step}, {"rank", rank}}, "config.json");
}

}  // namespace

TEST(StepRankGate, EmptyListsAdmitEverything) {
  const StepRankGate gate = StepRankGate::of(config_of("statistics", kAll, kAll));
  EXPECT_TRUE(gate.admits(0, -1));
  EXPECT_TRUE(gate.admits(12345, 63));
  EXPECT_FALSE(gate.past_last_step(1 << 30));
}

TEST(StepRankGate, ListsAreInclusiveRanges) {
  const StepRankGate gate = StepRankGate::of(config_of("statistics", {0, "3-4"}, {1, "5-6"}));
  EXPECT_TRUE(gate.admits(3, 6));
  EXPECT_FALSE(gate.admits(2, 6));
  EXPECT_FALSE(gate.admits(4, 2));
  EXPECT_TRUE(gate.step_in(4));
  EXPECT_FALSE(gate.past_last_step(4));
  EXPECT_TRUE(gate.past_last_step(5));
}

// msprobe's dump counts a process outside torch.distributed as rank 0 for the rank list; its
// grad_probe does not apply the list there at all. One gate, one named difference.
TEST(StepRankGate, OutsideTorchDistributedFollowsTheTask) {
  const StepRankGate dump0 = StepRankGate::of(config_of("statistics", kAll, {0}));
  const StepRankGate dump1 = StepRankGate::of(config_of("overflow_check", kAll, {1}));
  const StepRankGate grads1 = StepRankGate::of(config_of("grad_probe", kAll, {1}));
  EXPECT_TRUE(dump0.rank_in(-1));
  EXPECT_FALSE(dump1.rank_in(-1));
  EXPECT_TRUE(grads1.rank_in(-1));
  EXPECT_FALSE(grads1.rank_in(0));  // under torch.distributed the list applies to every task
  EXPECT_TRUE(grads1.rank_in(1));
  const StepRankGate own(RangeList({{2, 2}}), RangeList({{3, 3}}), OutsideDistributed::NotFiltered);
  EXPECT_TRUE(own.admits(2, -1));
  EXPECT_FALSE(own.admits(2, 0));
}
