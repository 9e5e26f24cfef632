// The training monitor's names (issue 55): msprobe 26.2.0's squash_param_name and target
// matching (module_hook.py), the expected names being what its regular expressions give.
#include <gtest/gtest.h>

#include "core/monitor_names.h"

using namespace msprobe;

TEST(MonitorNames, SquashKeepsThePartFromTheLastMatch) {
  EXPECT_EQ(monitor_squash_name("model.layers.0.mlp.down_proj.weight"),
            "layers.0.mlp.down_proj.weight");
  // The greedy `^.*\.` takes the last ".layers." / ".layer.".
  EXPECT_EQ(monitor_squash_name("a.layers.1.sub.layer.2.w"), "layer.2.w");
  EXPECT_EQ(monitor_squash_name("encoder.embeddings.word.weight"), "embeddings.word.weight");
  EXPECT_EQ(monitor_squash_name("model.final_layernorm.weight"), "final_layernorm.weight");
  EXPECT_EQ(monitor_squash_name("model.norm.weight"), "norm.weight");
  // A pattern needs a dot before it; "layerx." is no layer; the first pattern that matches wins.
  EXPECT_EQ(monitor_squash_name("output.weight"), "output.weight");
  EXPECT_EQ(monitor_squash_name("m.layerx.w"), "m.layerx.w");
  EXPECT_EQ(monitor_squash_name("m.norm.layers.0.w"), "layers.0.w");
}

TEST(MonitorNames, ParametersMatchTargetsAsWrittenAndSquashedNamesOnce) {
  MonitorNames names({"model.layers", "0:norm"}, true, false);
  EXPECT_EQ(names.parameter(0, "model.layers.0.fc.weight"), "0:layers.0.fc.weight");
  EXPECT_EQ(names.parameter(0, "x.layers.0.fc.weight"), std::nullopt);
  EXPECT_EQ(names.parameter(0, "model.norm.weight"), "0:norm.weight");
  // A second parameter squashed to a name already taken keeps its full name.
  EXPECT_EQ(names.parameter(0, "other.norm.weight"), "0:other.norm.weight");
  MonitorNames all({}, false, false);
  EXPECT_EQ(all.parameter(1, "fc1.weight"), "1:fc1.weight");
}

TEST(MonitorNames, ModulesMatchTargetsExactlyInEachChunk) {
  MonitorNames names({"fc1", "1:head", "layers.0"}, true, false);
  EXPECT_EQ(names.module(0, "fc1"), "0:fc1");
  EXPECT_EQ(names.module(2, "fc1"), "2:fc1");
  EXPECT_EQ(names.module(0, "fc10"), std::nullopt);
  EXPECT_EQ(names.module(0, "head"), std::nullopt);
  EXPECT_EQ(names.module(1, "head"), "1:head");
  EXPECT_EQ(names.module(0, "model.layers.0"), "0:layers.0");
  MonitorNames every({}, false, true);
  EXPECT_EQ(every.module(0, ""), "0:");
}
