#include "core/dump_format.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

namespace msprobe {
namespace {

Config config(Generation g, Task task = Task::Statistics, Level level = Level::L1) {
  Config c;
  c.generation = g;
  c.task = task;
  c.level = level;
  return c;
}

TEST(DumpFormatTest, Msprobe11WritesItsOwnFiles) {
  const DumpFormat f = DumpFormat::of(config(Generation::V1_1, Task::Statistics, Level::Mix));
  EXPECT_FALSE(f.framework);
  EXPECT_FALSE(f.grouped_stacks);
  EXPECT_TRUE(f.extra_info);
  EXPECT_FALSE(f.null_mean_norm);
  EXPECT_FALSE(f.float_only_mean_norm);
  EXPECT_FALSE(f.proc_folder);
  EXPECT_FALSE(f.last_part_names);
  EXPECT_FALSE(f.module_parameters);
  EXPECT_FALSE(f.module_grads_without_nulls);
  EXPECT_FALSE(f.optimizer_node);
  EXPECT_TRUE(f.records_in_dump_json);
  EXPECT_FALSE(f.debug_json);
  EXPECT_FALSE(f.positional_objects_untyped);
  EXPECT_FALSE(f.backward_from_any_grad_fn);
  EXPECT_FALSE(f.construct_in_start_order);
  EXPECT_STREQ(f.wrap_list, "support_wrap_ops.yaml");
}

TEST(DumpFormatTest, Msprobe26WritesItsOwnFiles) {
  const DumpFormat f = DumpFormat::of(config(Generation::V26));
  EXPECT_TRUE(f.framework);
  EXPECT_TRUE(f.grouped_stacks);
  EXPECT_TRUE(f.extra_info);
  EXPECT_FALSE(f.null_mean_norm);
  EXPECT_TRUE(f.float_only_mean_norm);
  EXPECT_TRUE(f.proc_folder);
  EXPECT_TRUE(f.last_part_names);
  EXPECT_FALSE(f.module_parameters);  // L1: no module records
  EXPECT_TRUE(f.module_grads_without_nulls);
  EXPECT_FALSE(f.optimizer_node);
  EXPECT_TRUE(f.records_in_dump_json);
  EXPECT_TRUE(f.positional_objects_untyped);
  EXPECT_TRUE(f.backward_from_any_grad_fn);
  EXPECT_TRUE(f.construct_in_start_order);
  EXPECT_STREQ(f.wrap_list, "support_wrap_ops_26.yaml");
}

TEST(DumpFormatTest, Msprobe26KeysAreTaken) {
  Config c = config(Generation::V26);
  c.msprobe26.extra_info = false;
  c.msprobe26.precision = Precision::High;
  const DumpFormat f = DumpFormat::of(c);
  EXPECT_FALSE(f.extra_info);
  EXPECT_TRUE(f.null_mean_norm);
  // Ignored by a 1.1 config.
  c.generation = Generation::V1_1;
  EXPECT_TRUE(DumpFormat::of(c).extra_info);
  EXPECT_FALSE(DumpFormat::of(c).null_mean_norm);
}

TEST(DumpFormatTest, ModuleParametersOnlyForStatisticsAndTensorAtL0AndMix) {
  const auto params = [](Task t, Level l) {
    return DumpFormat::of(config(Generation::V26, t, l)).module_parameters;
  };
  EXPECT_TRUE(params(Task::Statistics, Level::L0));
  EXPECT_TRUE(params(Task::Statistics, Level::Mix));
  EXPECT_TRUE(params(Task::Tensor, Level::L0));
  EXPECT_TRUE(params(Task::Tensor, Level::Mix));
  EXPECT_FALSE(params(Task::Tensor, Level::L1));
  EXPECT_FALSE(params(Task::OverflowCheck, Level::L0));
  EXPECT_FALSE(params(Task::Structure, Level::Mix));
}

TEST(DumpFormatTest, OptimizerNodeAtMixAndStructureKeepsRecordsOutOfDumpJson) {
  EXPECT_TRUE(DumpFormat::of(config(Generation::V26, Task::Statistics, Level::Mix)).optimizer_node);
  EXPECT_FALSE(DumpFormat::of(config(Generation::V26, Task::Statistics, Level::L0)).optimizer_node);
  EXPECT_FALSE(DumpFormat::of(config(Generation::V26, Task::Structure)).records_in_dump_json);
  EXPECT_TRUE(DumpFormat::of(config(Generation::V1_1, Task::Structure)).records_in_dump_json);
}

TEST(DumpFormatTest, LevelDebugWritesDebugJsonInEitherGeneration) {
  EXPECT_TRUE(DumpFormat::of(config(Generation::V1_1, Task::Statistics, Level::Debug)).debug_json);
  EXPECT_TRUE(DumpFormat::of(config(Generation::V26, Task::Statistics, Level::Debug)).debug_json);
  EXPECT_FALSE(DumpFormat::of(config(Generation::V26, Task::Statistics, Level::L0)).debug_json);
}

TEST(DumpFormatTest, TheUnrankedFolderIsRankOrThisProcess) {
  EXPECT_EQ(DumpFormat::of(config(Generation::V1_1)).unranked_folder(), "rank");
  EXPECT_EQ(DumpFormat::of(config(Generation::V26)).unranked_folder(),
            "proc" + std::to_string(getpid()));
}

TEST(DumpFormatTest, DottedApisKeepTheirLastPartIn26Only) {
  const DumpFormat v11 = DumpFormat::of(config(Generation::V1_1));
  const DumpFormat v26 = DumpFormat::of(config(Generation::V26));
  EXPECT_EQ(v11.api_call_name("Torch", "linalg.norm"), "Torch.linalg.norm");
  EXPECT_EQ(v26.api_call_name("Torch", "linalg.norm"), "Torch.norm");
  EXPECT_EQ(v26.api_call_name("Torch", "a.b.c"), "Torch.c");
  EXPECT_EQ(v26.api_call_name("Tensor", "add"), "Tensor.add");
  EXPECT_EQ(v26.api_call_name("Torch", "ends."), "Torch.");
  EXPECT_EQ(v11.api_call_name("Functional", ""), "Functional.");
}

}  // namespace
}  // namespace msprobe
