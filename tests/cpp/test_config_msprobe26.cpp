// msprobe 26.x's configs (docs/config.md, "msprobe 1.1.x and 26.x configs"): which generation a
// config speaks, its keys read and acted on, the tasks and levels refused with their reason, and
// what each generation's files look like (core/dump_format.h) and keep (core/risk_levels.h).

#include <string>

#include <gtest/gtest.h>

#include "core/config.h"
#include "core/dump_format.h"
#include "core/risk_levels.h"
#include "core/selection.h"
#include "test_util.h"

namespace msprobe {
namespace {

using msprobe::testing::error_of;
using nlohmann::json;

Config parse(const std::string& text) {
  return parse_config(json::parse(text), "config.json");
}

std::string error(const std::string& text) {
  return error_of<ConfigError>([&] { parse(text); });
}

// msprobe 26.2.0's own config.json, as its wheel ships it.
constexpr const char* kShipped26 = R"({
    "task": "statistics", "dump_path": "./dump_path", "rank": [], "step": [], "level": "L1",
    "extra_info": true, "async_dump": false,
    "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"},
    "tensor": {"scope": [], "list": [], "data_mode": ["all"]},
    "acc_check": {"white_list": [], "black_list": [], "error_data_path": "./"}
})";

TEST(Msprobe26Config, TheShippedConfigRunsAndSpeaks26) {
  Config c = parse(kShipped26);
  EXPECT_EQ(c.generation, Generation::V26);
  EXPECT_EQ(c.task, Task::Statistics);
  EXPECT_TRUE(c.msprobe26.extra_info);
  EXPECT_EQ(c.msprobe26.precision, Precision::Low);
  EXPECT_EQ(c.msprobe26.risk_level, RiskLevel::Focus);
}

TEST(Msprobe26Config, A11ConfigKeeps11) {
  EXPECT_EQ(parse(R"({"task": "statistics", "dump_path": "d", "level": "mix",
                      "statistics": {"summary_mode": "md5"}})")
                .generation,
            Generation::V1_1);
}

TEST(Msprobe26Config, EachKeyOnlyTwentySixKnowsMakesIt26) {
  for (const char* extra :
       {R"("extra_info": false)", R"("precision": "high")", R"("risk_level": "ALL")",
        R"("acc_check": {})", R"("nan_check": {})", R"("custom_op_namespaces": ["_C_ascend"])",
        R"("statistics": {"tensor_list": []})", R"("tensor": {"slice": []})"}) {
    const std::string text = std::string(R"({"dump_path": "d", )") + extra + "}";
    EXPECT_EQ(parse(text).generation, Generation::V26) << text;
  }
}

TEST(Msprobe26Config, MsprobeGenerationForcesEither) {
  Config old = parse(R"({"dump_path": "d", "extra_info": false, "msprobe_generation": "1.1"})");
  EXPECT_EQ(old.generation, Generation::V1_1);
  EXPECT_FALSE(old.msprobe26.extra_info);  // read all the same; 1.1.x files have both files
  EXPECT_TRUE(DumpFormat::of(old).extra_info);
  EXPECT_EQ(parse(R"({"dump_path": "d", "msprobe_generation": "26"})").generation, Generation::V26);
  EXPECT_EQ(error(R"({"dump_path": "d", "msprobe_generation": 26})"),
            "config.json: msprobe_generation: expected one of 1.1, 26, got 26");
}

TEST(Msprobe26Config, KeysAreRead) {
  Config c = parse(R"({"dump_path": "d", "extra_info": false, "precision": "high",
                       "risk_level": "CORE"})");
  EXPECT_FALSE(c.msprobe26.extra_info);
  EXPECT_EQ(c.msprobe26.precision, Precision::High);
  EXPECT_EQ(c.msprobe26.risk_level, RiskLevel::Core);
  // 26.2.0 reads an explicit null or "" as ALL.
  EXPECT_EQ(parse(R"({"dump_path": "d", "risk_level": null})").msprobe26.risk_level, RiskLevel::All);
  EXPECT_EQ(parse(R"({"dump_path": "d", "risk_level": ""})").msprobe26.risk_level, RiskLevel::All);
}

TEST(Msprobe26Config, BadValuesAreToldInOneLineEach) {
  EXPECT_EQ(error(R"({"dump_path": "d", "extra_info": "yes"})"),
            "config.json: extra_info: expected true or false, got \"yes\"");
  EXPECT_EQ(error(R"({"dump_path": "d", "precision": "medium"})"),
            "config.json: precision: expected one of low, high, got \"medium\"");
  EXPECT_EQ(error(R"({"dump_path": "d", "risk_level": "focus"})"),
            "config.json: risk_level: expected one of CORE, FOCUS, ALL, got \"focus\"");
  EXPECT_EQ(error(R"({"dump_path": "d", "acc_check": []})"),
            "config.json: acc_check: expected an object, got []");
  // A typo of a 26.x key is a typo still.
  EXPECT_NE(error(R"({"dump_path": "d", "extra_inf": true})").find("did you mean \"extra_info\""),
            std::string::npos);
}

TEST(Msprobe26Config, TasksAndLevelsThatNeedAnotherDeviceAreRefusedWithWhy) {
  const std::string acc = error(R"({"dump_path": "d", "task": "acc_check"})");
  EXPECT_EQ(acc.find("config.json: task: \"acc_check\" is an msprobe 26.x value that msprobe_cpp "
                     "refuses: task acc_check: it runs each API again on a second device"),
            0u)
      << acc;
  EXPECT_NE(error(R"({"dump_path": "d", "task": "nan_check"})").find("needs an Ascend NPU"),
            std::string::npos);
  EXPECT_NE(error(R"({"dump_path": "d", "level": "L2"})").find("level L2: it dumps NPU kernels"),
            std::string::npos);
  for (const std::string& e : {acc, error(R"({"dump_path": "d", "level": "L2"})")}) {
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

TEST(Msprobe26Config, SectionKeysAreReadAndChecked) {
  const Config c = parse(R"({"dump_path": "d", "statistics": {
      "tensor_list": ["relu", "linear.0"], "request_id": "b", "summary_mode": "xor",
      "slice": [{"dim": 1, "begin": -2, "size": 8}, {"end": 3}]}})");
  EXPECT_EQ(c.generation, Generation::V26);
  EXPECT_EQ(c.statistics.tensor_list, (std::vector<std::string>{"relu", "linear.0"}));
  EXPECT_EQ(c.statistics.summary_mode, SummaryMode::Xor);
  EXPECT_EQ(c.statistics.msprobe26.request_id, std::optional<std::string>("b"));
  ASSERT_EQ(c.statistics.msprobe26.slice.size(), 2u);
  EXPECT_EQ(c.statistics.msprobe26.slice[0].dim, 1);
  EXPECT_EQ(c.statistics.msprobe26.slice[0].begin, -2);
  EXPECT_EQ(c.statistics.msprobe26.slice[0].size, std::optional<int64_t>(8));
  EXPECT_FALSE(c.statistics.msprobe26.slice[0].end.has_value());
  EXPECT_EQ(c.statistics.msprobe26.slice[1].end, std::optional<int64_t>(3));
  EXPECT_EQ(error(R"({"dump_path": "d", "statistics": {"slice": [{"dim": -1}]}})"),
            "config.json: statistics.slice[0].dim: expected an integer >= 0, got -1");
  EXPECT_EQ(error(R"({"dump_path": "d", "statistics": {"slice": [{"begin": "1"}]}})"),
            R"(config.json: statistics.slice[0].begin: expected an integer, got "1")");
  EXPECT_EQ(error(R"({"dump_path": "d", "statistics": {"request_id": 7}})"),
            "config.json: statistics.request_id: expected a string, got 7");
  EXPECT_EQ(error(R"({"dump_path": "d", "tensor": {"summary_mode": "md5"}})").find(
                R"(config.json: tensor.summary_mode: "md5" is an msprobe 26.x value)"),
            0u);
  EXPECT_EQ(parse(R"({"dump_path": "d", "dump_enable": false})").msprobe26.dump_enable,
            std::optional<bool>(false));
  EXPECT_EQ(error(R"({"dump_path": "d", "dump_enable": 1})"),
            "config.json: dump_enable: expected true or false, got 1");
}

TEST(Msprobe26Config, StructureAndDebugRunAndNameRegexIsTold) {
  const Config structure = parse(R"({"dump_path": "d", "task": "structure"})");
  EXPECT_EQ(structure.task, Task::Structure);
  EXPECT_EQ(structure.level, Level::Mix);  // as 26.x takes L1 there
  ASSERT_EQ(structure.warnings.size(), 1u);
  EXPECT_EQ(parse(R"({"dump_path": "d", "level": "debug"})").level, Level::Debug);
  EXPECT_EQ(parse(R"({"dump_path": "d", "level": "debug"})").generation, Generation::V26);
  const Config regex =
      parse(R"x({"dump_path": "d", "statistics": {"list": ["name-regex(lin.*)", "relu"]}})x");
  ASSERT_EQ(regex.warnings.size(), 1u);
  EXPECT_NE(regex.warnings[0].find("\"name-regex(lin.*)\" selects no call"), std::string::npos)
      << regex.warnings[0];
}

TEST(DumpFormat, EachGenerationsFiles) {
  const DumpFormat old = DumpFormat::of(parse(R"({"dump_path": "d"})"));
  EXPECT_FALSE(old.framework || old.grouped_stacks || old.proc_folder || old.last_part_names);
  EXPECT_EQ(old.unranked_folder(), "rank");
  EXPECT_EQ(old.api_call_name("Torch", "linalg.norm"), "Torch.linalg.norm");
  EXPECT_STREQ(old.wrap_list, "support_wrap_ops.yaml");

  const DumpFormat now = DumpFormat::of(parse(kShipped26));
  EXPECT_TRUE(now.framework && now.grouped_stacks && now.proc_folder && now.extra_info);
  EXPECT_TRUE(now.float_only_mean_norm);
  EXPECT_FALSE(now.null_mean_norm);
  EXPECT_EQ(now.unranked_folder().rfind("proc", 0), 0u);
  EXPECT_EQ(now.api_call_name("Torch", "linalg.norm"), "Torch.norm");
  EXPECT_STREQ(now.wrap_list, "support_wrap_ops_26.yaml");
  EXPECT_TRUE(
      DumpFormat::of(parse(R"({"dump_path": "d", "precision": "high"})")).null_mean_norm);
  EXPECT_FALSE(DumpFormat::of(parse(R"({"dump_path": "d", "extra_info": false})")).extra_info);
}

TEST(RiskLevels, ApisAsTwentySixRatesThem) {
  EXPECT_EQ(api_risk("Torch.matmul.0.forward"), ApiRisk::Core);
  EXPECT_EQ(api_risk("Distributed.all_reduce.3.backward"), ApiRisk::Core);
  EXPECT_EQ(api_risk("Tensor.reshape.0.forward"), ApiRisk::Low);
  EXPECT_EQ(api_risk("Torch.cat.12.forward"), ApiRisk::Low);
  // 26.2.0's missing comma: neither chain_matmul nor linear is core there.
  EXPECT_EQ(api_risk("Functional.linear.0.forward"), ApiRisk::Focus);
  EXPECT_EQ(api_risk("Torch.chain_matmul.0.forward"), ApiRisk::Focus);
  EXPECT_EQ(api_risk("Functional.relu.0.forward"), ApiRisk::Focus);

  EXPECT_TRUE(kept_at_risk_level("Functional.relu.0.forward", RiskLevel::Focus));
  EXPECT_FALSE(kept_at_risk_level("Tensor.reshape.0.forward", RiskLevel::Focus));
  EXPECT_FALSE(kept_at_risk_level("Functional.relu.0.forward", RiskLevel::Core));
  EXPECT_TRUE(kept_at_risk_level("Tensor.reshape.0.forward", RiskLevel::All));
  EXPECT_TRUE(kept_at_risk_level("Module.fc.Linear.forward.0", RiskLevel::Core));
}

TEST(RiskLevels, OnlyTwentySixDumpsAtApiLevelsFilter) {
  EXPECT_EQ(effective_risk_level(parse(kShipped26)), RiskLevel::Focus);
  EXPECT_EQ(effective_risk_level(parse(R"({"dump_path": "d"})")), RiskLevel::All);
  EXPECT_EQ(effective_risk_level(parse(R"({"dump_path": "d", "extra_info": true, "level": "L0"})")),
            RiskLevel::All);
  // The guard judges every call, whatever the config asks of a dump.
  EXPECT_EQ(effective_risk_level(
                parse(R"({"dump_path": "d", "extra_info": true, "task": "overflow_check"})")),
            RiskLevel::All);
}

TEST(RiskLevels, SelectionDropsLowRiskCallsOnlyWithoutScopeOrList) {
  Selection focus(CollectSection{}, Level::L1, "config.json: statistics", RiskLevel::Focus);
  EXPECT_FALSE(focus.begin("Tensor.reshape.0.forward", "Tensor.reshape.0.backward", false).any());
  EXPECT_TRUE(focus.begin("Functional.relu.0.forward", "Functional.relu.0.backward", false).forward);
  CollectSection listed;
  listed.list = {"reshape"};
  Selection with_list(listed, Level::L1, "config.json: statistics", RiskLevel::Focus);
  EXPECT_TRUE(
      with_list.begin("Tensor.reshape.0.forward", "Tensor.reshape.0.backward", false).forward);
}

}  // namespace
}  // namespace msprobe
