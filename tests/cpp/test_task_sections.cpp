#include "core/task_sections.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace msprobe {
namespace {

using config_checks::Loc;
using nlohmann::json;
using msprobe::testing::error_of;

const Loc kGrad = Loc("config.json").child("grad_probe");
const Loc kBench = Loc("config.json").child("free_benchmark");

GradProbeSection grad(const std::string& text) {
  const json section = json::parse(text);
  return parse_grad_probe(&section, kGrad);
}

std::string grad_error(const std::string& text) {
  return error_of<ConfigError>([&] { grad(text); });
}

FreeBenchmarkSection bench(const std::string& text) {
  const json section = json::parse(text);
  return parse_free_benchmark(&section, kBench);
}

std::string bench_error(const std::string& text) {
  return error_of<ConfigError>([&] { bench(text); });
}

std::vector<std::string> texts(const std::vector<GradBound>& bounds) {
  std::vector<std::string> out;
  for (const GradBound& b : bounds) out.push_back(b.text);
  return out;
}

TEST(TaskSectionsTest, NoGradProbeSectionIsEveryDefault) {
  const GradProbeSection s = parse_grad_probe(nullptr, kGrad);
  EXPECT_EQ(s.level, GradLevel::L1);
  EXPECT_TRUE(s.param_list.empty());
  EXPECT_EQ(texts(s.bounds), (std::vector<std::string>{"-1", "0", "1"}));
  EXPECT_EQ(texts(grad("{}").bounds), (std::vector<std::string>{"-1", "0", "1"}));
}

TEST(TaskSectionsTest, GradProbeKeysAreRead) {
  const GradProbeSection s =
      grad(R"({"grad_level": "L2", "param_list": ["fc.weight"], "bounds": [-3, 1e-05, 0.5, 2]})");
  EXPECT_EQ(s.level, GradLevel::L2);
  EXPECT_EQ(s.param_list, std::vector<std::string>{"fc.weight"});
  EXPECT_EQ(texts(s.bounds), (std::vector<std::string>{"-3", "1e-05", "0.5", "2"}));
  EXPECT_DOUBLE_EQ(s.bounds[1].value, 1e-05);
  // msprobe's other section keys are taken and ignored.
  EXPECT_EQ(grad(R"({"scope": ["x"], "max_sample": 3})").level, GradLevel::L1);
}

TEST(TaskSectionsTest, BoundsMustAscendWithinInt64) {
  EXPECT_EQ(grad_error(R"({"bounds": [0, 0]})"),
            "config.json: grad_probe.bounds[1]: expected a number above the one before it "
            "(bounds ascend), got 0");
  EXPECT_EQ(grad_error(R"({"bounds": 1})"),
            "config.json: grad_probe.bounds: expected a list of numbers in ascending order, got 1");
  const std::string range = "expected a number from -2**63 to 2**63-1, got ";
  EXPECT_EQ(grad_error(R"({"bounds": [9223372036854775808]})"),
            "config.json: grad_probe.bounds[0]: " + range + "9223372036854775808");
  EXPECT_EQ(grad_error(R"({"bounds": [-9223372036854775809]})"),
            "config.json: grad_probe.bounds[0]: " + range + "-9.223372036854776e+18");
  EXPECT_EQ(grad_error(R"({"bounds": [true]})"), "config.json: grad_probe.bounds[0]: " + range +
                                                     "true");
  EXPECT_EQ(texts(grad(R"({"bounds": [-9223372036854775808, 9223372036854775807]})").bounds),
            (std::vector<std::string>{"-9223372036854775808", "9223372036854775807"}));
}

TEST(TaskSectionsTest, EveryBadGradProbeKeyIsToldAtOnce) {
  EXPECT_EQ(grad_error(R"({"grad_levle": "L0", "grad_level": "L3", "param_list": [""]})"),
            "config.json: grad_probe.grad_levle: unknown key; did you mean \"grad_level\"?\n"
            "config.json: grad_probe.grad_level: expected one of L0, L1, L2, got \"L3\"\n"
            "config.json: grad_probe.param_list[0]: expected a non-empty string, got \"\"");
  EXPECT_EQ(grad_error("[]"), "config.json: grad_probe: expected an object, got []");
}

TEST(TaskSectionsTest, NoFreeBenchmarkSectionIsEveryDefault) {
  const FreeBenchmarkSection s = parse_free_benchmark(nullptr, kBench);
  EXPECT_EQ(s.pert_mode, PertMode::ImprovePrecision);
  EXPECT_FALSE(s.fuzz_on_cpu);
  EXPECT_EQ(s.handler, HandlerType::Check);
  EXPECT_EQ(s.stage, FuzzStage::Forward);
  EXPECT_FALSE(s.preheat);
  EXPECT_EQ(bench("{}").max_sample, 15);
}

TEST(TaskSectionsTest, FreeBenchmarkKeysAreRead) {
  const FreeBenchmarkSection s = bench(
      R"({"pert_mode": "add_noise", "fuzz_stage": "backward", "fuzz_level": "L1",
          "if_preheat": true, "preheat_step": 4, "max_sample": 9,
          "scope": "Torch.add.0.forward"})");
  EXPECT_EQ(s.pert_mode, PertMode::AddNoise);
  EXPECT_EQ(s.stage, FuzzStage::Backward);
  EXPECT_TRUE(s.preheat);
  EXPECT_EQ(s.preheat_step, 4);
  EXPECT_EQ(s.max_sample, 9);
  EXPECT_EQ(s.scope, std::vector<std::string>{"Torch.add.0.forward"});
  const FreeBenchmarkSection cpu = bench(R"({"pert_mode": "to_cpu", "fuzz_device": "cpu"})");
  EXPECT_TRUE(cpu.fuzz_on_cpu);
  EXPECT_EQ(bench(R"({"list": ["add", "mul"]})").list, (std::vector<std::string>{"add", "mul"}));
}

TEST(TaskSectionsTest, PreheatCountsAreCheckedOnlyWithPreheat) {
  EXPECT_EQ(bench(R"({"preheat_step": 0, "max_sample": "x"})").preheat_step, 15);
  EXPECT_EQ(bench_error(R"({"if_preheat": true, "preheat_step": 0, "max_sample": true})"),
            "config.json: free_benchmark.preheat_step: expected an integer > 0, got 0\n"
            "config.json: free_benchmark.max_sample: expected an integer > 0, got true");
}

TEST(TaskSectionsTest, FuzzDeviceCpuGoesWithToCpuOnly) {
  EXPECT_EQ(bench_error(R"({"fuzz_device": "cpu"})"),
            "config.json: free_benchmark.fuzz_device: expected \"npu\" (\"cpu\" goes with "
            "pert_mode to_cpu only), got \"cpu\"");
  EXPECT_EQ(bench_error(R"({"pert_mode": "to_cpu"})"),
            "config.json: free_benchmark.fuzz_device: expected \"cpu\" with pert_mode to_cpu, "
            "got \"npu\"");
}

TEST(TaskSectionsTest, HandlerFixRefusesWhatItCannotFix) {
  EXPECT_EQ(bench_error(R"({"handler_type": "fix", "if_preheat": true})"),
            "config.json: free_benchmark.if_preheat: expected false with handler_type fix (no "
            "preheat), got true");
  EXPECT_EQ(bench_error(R"({"handler_type": "fix", "fuzz_stage": "backward"})"),
            "config.json: free_benchmark.fuzz_stage: expected \"forward\" with handler_type fix, "
            "got \"backward\"");
  EXPECT_EQ(bench_error(R"({"handler_type": "fix", "pert_mode": "bit_noise"})"),
            "config.json: free_benchmark.pert_mode: expected improve_precision or to_cpu with "
            "handler_type fix, got \"bit_noise\"");
  EXPECT_EQ(bench(R"({"handler_type": "fix", "pert_mode": "to_cpu", "fuzz_device": "cpu"})")
                .handler,
            HandlerType::Fix);
}

TEST(TaskSectionsTest, ScopeAndListExcludeEachOther) {
  EXPECT_EQ(bench_error(R"({"scope": ["a"], "list": ["b"]})"),
            "config.json: free_benchmark.list: expected [] when scope is given (msprobe takes one "
            "or the other), got [\"b\"]");
  EXPECT_EQ(bench_error(R"({"scope": 3})"),
            "config.json: free_benchmark.scope: expected a call name or a list of call names, got "
            "3");
}

TEST(TaskSectionsTest, EveryBadFreeBenchmarkKeyIsToldAtOnce) {
  EXPECT_EQ(bench_error(R"({"pert_mod": 1, "fuzz_level": "L2", "handler_type": "Fix"})"),
            "config.json: free_benchmark.pert_mod: unknown key; did you mean \"pert_mode\"?\n"
            "config.json: free_benchmark.handler_type: expected one of check, fix, got \"Fix\"\n"
            "config.json: free_benchmark.fuzz_level: expected one of L1, got \"L2\"");
  EXPECT_EQ(bench_error("null"), "config.json: free_benchmark: expected an object, got null");
}

}  // namespace
}  // namespace msprobe
