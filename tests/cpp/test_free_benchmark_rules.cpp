// free_benchmark's rules (msprobe 1.1.1's free_benchmark): thresholds, tolerances, chunking, the
// calls a second run must not touch, the CSV row, the config section and its refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "core/config.h"
#include "core/free_benchmark_rules.h"
#include "test_util.h"

using namespace msprobe;
using msprobe::testing::error_of;
using nlohmann::json;

namespace {

Config fb_config(const json& section, const json& top = json::object()) {
  json doc = {{"task", "free_benchmark"}, {"dump_path", "out"}, {"free_benchmark", section}};
  for (const auto& [k, v] : top.items()) doc[k] = v;
  return parse_config(doc, "config.json");
}

std::string fb_error(const json& section, const json& top = json::object()) {
  return error_of<ConfigError>([&] { fb_config(section, top); });
}

}  // namespace

TEST(FreeBenchmarkRules, ThresholdsByOriginalDtype) {
  EXPECT_DOUBLE_EQ(ratio_threshold(FloatKind::Half, PertMode::AddNoise), 1.002);
  EXPECT_DOUBLE_EQ(ratio_threshold(FloatKind::BFloat16, PertMode::ImprovePrecision), 1.004);
  EXPECT_DOUBLE_EQ(ratio_threshold(FloatKind::Float, PertMode::BitNoise), 1.0002);
  EXPECT_DOUBLE_EQ(ratio_threshold(FloatKind::Double, PertMode::ChangeValue), 1.0002);
  EXPECT_DOUBLE_EQ(ratio_threshold(FloatKind::Other, PertMode::ChangeValue), 1.0002);
  EXPECT_DOUBLE_EQ(ratio_threshold(FloatKind::Half, PertMode::NoChange), 1.0);
  EXPECT_TRUE(consistent(1.002, 1.002));
  EXPECT_TRUE(consistent(1 / 1.002, 1.002));
  EXPECT_FALSE(consistent(1.0021, 1.002));
  EXPECT_FALSE(consistent(-std::numeric_limits<double>::infinity(), 1.002));  // an empty output
  EXPECT_FALSE(consistent(std::nan(""), 1.002));
  EXPECT_TRUE(consistent(1.0, 1.0));
}

TEST(FreeBenchmarkRules, PerturbationValuesAndTolerances) {
  EXPECT_DOUBLE_EQ(*perturbation_value(FloatKind::BFloat16), 1e-4);
  EXPECT_DOUBLE_EQ(*perturbation_value(FloatKind::Half), 1e-6);
  EXPECT_DOUBLE_EQ(*perturbation_value(FloatKind::Float), 1e-8);
  EXPECT_DOUBLE_EQ(*perturbation_value(FloatKind::Double), 1e-16);
  EXPECT_FALSE(perturbation_value(FloatKind::Other));
  EXPECT_DOUBLE_EQ(ratio_tolerance(FloatKind::BFloat16, FuzzStage::Forward), 0.01);
  EXPECT_DOUBLE_EQ(ratio_tolerance(FloatKind::Half, FuzzStage::Forward), 0.001);
  EXPECT_DOUBLE_EQ(ratio_tolerance(FloatKind::Float, FuzzStage::Forward), 0.0001);
  EXPECT_DOUBLE_EQ(ratio_tolerance(FloatKind::Other, FuzzStage::Forward), 0.0001);
  EXPECT_DOUBLE_EQ(ratio_tolerance(FloatKind::Half, FuzzStage::Backward), 1e-3);
}

TEST(FreeBenchmarkRules, ChunksAsMsprobe) {
  const int64_t mib = 1 << 20;
  EXPECT_EQ(ratio_chunks(0, 1), 1);
  EXPECT_EQ(ratio_chunks(100, 0), 1);
  EXPECT_EQ(ratio_chunks(100, 2), 1);
  EXPECT_EQ(ratio_chunks(31 * mib, 1), 1);
  EXPECT_EQ(ratio_chunks(32 * mib, 1), 2);
  EXPECT_EQ(ratio_chunks(64 * mib, 1), 4);
  EXPECT_EQ(ratio_chunks(100 * mib, 1), 4);
  EXPECT_EQ(ratio_chunks(4096 * mib, 1), 128);
  EXPECT_EQ(ratio_chunks(int64_t(1) << 40, 1), 128);
}

TEST(FreeBenchmarkRules, SkipsWhatASecondRunWouldChange) {
  EXPECT_EQ(skip_reason("Torch.add", false), "");
  EXPECT_EQ(skip_reason("Tensor.add_", false), "");
  EXPECT_NE(skip_reason("Functional.dropout", false).find("random"), std::string::npos);
  EXPECT_NE(skip_reason("Torch.randn_like", false).find("random"), std::string::npos);
  EXPECT_NE(skip_reason("Torch.multinomial", false).find("random"), std::string::npos);
  EXPECT_NE(skip_reason("Tensor.uniform_", false).find("random"), std::string::npos);
  EXPECT_NE(skip_reason("Distributed.all_reduce", false).find("collective"), std::string::npos);
  EXPECT_NE(skip_reason("Torch.add", true).find("out="), std::string::npos);
}

TEST(FreeBenchmarkRules, RowsAsMsprobe) {
  EXPECT_EQ(free_benchmark_header(),
            "rank,pert_mode,stage,step,api_name,max_rel,dtype,shape,output_index\r\n");
  UnequalRow row;
  row.pert_mode = "change_value";
  row.stage = "forward";
  row.api_name = "Torch.exp.0.forward";
  row.ratio = 12.1796875;
  row.dtype = "torch.float16";
  row.shape = {2, 2};
  row.has_shape = true;
  EXPECT_EQ(
      free_benchmark_row(row),
      "0,change_value,forward,0,Torch.exp.0.forward,11.1796875,torch.float16,\"torch.Size([2, "
      "2])\",\r\n");
  row.shape = {2};
  row.output_index = 0;
  row.ratio = -std::numeric_limits<double>::infinity();
  EXPECT_EQ(
      free_benchmark_row(row),
      "0,change_value,forward,0,Torch.exp.0.forward,-inf,torch.float16,torch.Size([2]),0\r\n");
  UnequalRow cpu;  // to_cpu's comparison: no ratio; a tuple output: no dtype or shape
  cpu.rank = 3;
  cpu.pert_mode = "to_cpu";
  cpu.stage = "forward";
  cpu.step = 2;
  cpu.api_name = "Torch.var_mean.0.forward";
  EXPECT_EQ(free_benchmark_row(cpu), "3,to_cpu,forward,2,Torch.var_mean.0.forward,,,,\r\n");
}

TEST(FreeBenchmarkConfig, DefaultsAsMsprobe) {
  const Config c = fb_config(json::object());
  EXPECT_EQ(c.task, Task::FreeBenchmark);
  EXPECT_FALSE(c.records_calls());
  EXPECT_TRUE(c.dumps_calls());
  const FreeBenchmarkSection& s = c.free_benchmark;
  EXPECT_EQ(s.pert_mode, PertMode::ImprovePrecision);
  EXPECT_FALSE(s.fuzz_on_cpu);
  EXPECT_EQ(s.handler, HandlerType::Check);
  EXPECT_EQ(s.stage, FuzzStage::Forward);
  EXPECT_FALSE(s.preheat);
  EXPECT_EQ(s.preheat_step, 15);
  EXPECT_EQ(s.max_sample, 15);  // msprobe 1.1.1 reads the preheat_step default for it
}

TEST(FreeBenchmarkConfig, ReadsEveryKey) {
  const Config c = fb_config({{"pert_mode", "to_cpu"},
                              {"fuzz_device", "cpu"},
                              {"handler_type", "fix"},
                              {"fuzz_level", "L1"},
                              {"fuzz_stage", "forward"},
                              {"scope", "Torch.add.0.forward"}});
  EXPECT_EQ(c.free_benchmark.pert_mode, PertMode::ToCpu);
  EXPECT_TRUE(c.free_benchmark.fuzz_on_cpu);
  EXPECT_EQ(c.free_benchmark.handler, HandlerType::Fix);
  EXPECT_EQ(c.free_benchmark.scope, (std::vector<std::string>{"Torch.add.0.forward"}));
  const Config p = fb_config({{"if_preheat", true},
                              {"preheat_step", 4},
                              {"max_sample", 3},
                              {"fuzz_stage", "backward"},
                              {"list", {"matmul"}}});
  EXPECT_TRUE(p.free_benchmark.preheat);
  EXPECT_EQ(p.free_benchmark.preheat_step, 4);
  EXPECT_EQ(p.free_benchmark.max_sample, 3);
  EXPECT_EQ(p.free_benchmark.stage, FuzzStage::Backward);
  // preheat_step is read only with if_preheat, as msprobe reads it.
  EXPECT_NO_THROW(fb_config({{"preheat_step", 0}}));
}

TEST(FreeBenchmarkConfig, MsprobesRefusals) {
  EXPECT_EQ(fb_error({{"pert_mode", "shuffle"}}),
            "config.json: free_benchmark.pert_mode: expected one of improve_precision, add_noise, "
            "bit_noise, change_value, no_change, to_cpu, got \"shuffle\"");
  EXPECT_EQ(fb_error({{"pert_mode", "to_cpu"}}),
            "config.json: free_benchmark.fuzz_device: expected \"cpu\" with pert_mode to_cpu, got "
            "\"npu\"");
  EXPECT_EQ(
      fb_error({{"fuzz_device", "cpu"}}),
      "config.json: free_benchmark.fuzz_device: expected \"npu\" (\"cpu\" goes with pert_mode "
      "to_cpu only), got \"cpu\"");
  EXPECT_EQ(fb_error({{"handler_type", "fix"}, {"pert_mode", "add_noise"}}),
            "config.json: free_benchmark.pert_mode: expected improve_precision or to_cpu with "
            "handler_type fix, got \"add_noise\"");
  EXPECT_EQ(
      fb_error({{"handler_type", "fix"}, {"fuzz_stage", "backward"}}),
      "config.json: free_benchmark.fuzz_stage: expected \"forward\" with handler_type fix, got "
      "\"backward\"");
  EXPECT_EQ(fb_error({{"handler_type", "fix"}, {"if_preheat", true}}),
            "config.json: free_benchmark.if_preheat: expected false with handler_type fix (no "
            "preheat), got true");
  EXPECT_EQ(
      fb_error({{"handler_type", "preheat"}}),
      "config.json: free_benchmark.handler_type: expected one of check, fix, got \"preheat\"");
  EXPECT_EQ(fb_error({{"fuzz_level", "L2"}}),
            "config.json: free_benchmark.fuzz_level: expected one of L1, got \"L2\"");
  EXPECT_EQ(fb_error({{"if_preheat", true}, {"preheat_step", 0}}),
            "config.json: free_benchmark.preheat_step: expected an integer > 0, got 0");
  EXPECT_EQ(fb_error({{"if_preheat", true}, {"max_sample", "3"}}),
            "config.json: free_benchmark.max_sample: expected an integer > 0, got \"3\"");
  EXPECT_EQ(
      fb_error({{"scope", {"Torch.add.0.forward"}}, {"list", {"add"}}}),
      "config.json: free_benchmark.list: expected [] when scope is given (msprobe takes one or "
      "the other), got [\"add\"]");
  EXPECT_EQ(
      fb_error({{"scope", 3}}),
      "config.json: free_benchmark.scope: expected a call name or a list of call names, got 3");
  EXPECT_EQ(
      fb_error(json::object(), {{"level", "mix"}}),
      "config.json: level: expected \"L1\" with task free_benchmark (it checks API calls), got "
      "\"mix\"");
}
