// The training monitor's config (issue 55): msprobe 26.2.0's keys and defaults, and the one-line
// messages for bad values.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "core/config_error.h"
#include "core/monitor_config.h"

using namespace msprobe;
using nlohmann::json;

namespace {

std::string error_of(const json& doc) {
  try {
    parse_monitor_config(doc, "monitor.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> op_names(const MonitorConfig& c) {
  std::vector<std::string> names;
  for (MonitorOp op : c.output.ops) names.emplace_back(monitor_op_name(op));
  return names;
}

}  // namespace

TEST(MonitorConfig, DefaultsAreMsprobes) {
  const MonitorConfig c = parse_monitor_config(json::object(), "monitor.json");
  EXPECT_TRUE(c.targets.empty());
  EXPECT_FALSE(c.families.xy_distribution);
  EXPECT_FALSE(c.families.all_xy);
  EXPECT_EQ(op_names(c), (std::vector<std::string>{"norm", "shape", "dtype"}));
  EXPECT_EQ(c.output.eps, 1e-8);
  EXPECT_EQ(c.output.ndigits, 6);
  EXPECT_EQ(c.schedule.start_step, 0);
  EXPECT_EQ(c.schedule.step_interval, 1);
  EXPECT_EQ(c.schedule.collect_times, 100000000);
  EXPECT_EQ(c.schedule.step_count_per_record, 1);
  EXPECT_EQ(c.output.format, MonitorOutput::Format::Csv);
  EXPECT_TRUE(c.alerts.rules.empty());
  EXPECT_TRUE(c.notes.empty());
}

TEST(MonitorConfig, ReadsTheConfigOfMsprobesOwnExample) {
  const json doc = json::parse(R"({
    "targets": {"fc1": {}, "fc2": {}}, "xy_distribution": true, "wg_distribution": true,
    "mv_distribution": true, "param_distribution": true,
    "ops": ["min", "max", "norm", "zeros", "nans", "mean"], "eps": 1e-8, "ndigits": 6,
    "step_count_per_record": 1, "format": "csv",
    "alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}}],
              "dump": true}})");
  const MonitorConfig c = parse_monitor_config(doc, "monitor.json");
  EXPECT_EQ(c.targets, (std::vector<std::string>{"fc1", "fc2"}));
  EXPECT_TRUE(c.families.xy_distribution && c.families.wg_distribution);
  EXPECT_TRUE(c.families.mv_distribution);
  EXPECT_TRUE(c.families.param_distribution);
  EXPECT_FALSE(c.families.all_xy);  // targets named
  EXPECT_EQ(op_names(c), (std::vector<std::string>{"min", "max", "norm", "zeros", "nans", "mean",
                                                   "shape", "dtype"}));
  ASSERT_EQ(c.alerts.rules.size(), 1u);
  EXPECT_EQ(c.alerts.rules[0].kind, MonitorAlertRule::Kind::Turbulence);
  EXPECT_EQ(c.alerts.rules[0].threshold, 0.5);
  EXPECT_TRUE(c.alerts.dump);
}

TEST(MonitorConfig, XyWithoutTargetsWatchesEveryModule) {
  const MonitorConfig c = parse_monitor_config(json{{"xy_distribution", true}}, "m.json");
  EXPECT_TRUE(c.families.all_xy);
}

TEST(MonitorConfig, NamedShapeAndDtypeKeepTheirPlace) {
  const MonitorConfig c =
      parse_monitor_config(json{{"ops", {"dtype", "max", "shape"}}}, "m.json");
  EXPECT_EQ(op_names(c), (std::vector<std::string>{"dtype", "max", "shape"}));
  const MonitorConfig shape_only = parse_monitor_config(json{{"ops", {"shape"}}}, "m.json");
  EXPECT_EQ(op_names(shape_only), (std::vector<std::string>{"shape", "dtype"}));
}

TEST(MonitorConfig, SaysWhatMsprobeSaysWhenItGoesOn) {
  const MonitorConfig c = parse_monitor_config(
      json{{"ur_distribution", true}, {"forward_only", true}, {"backward_only", true}}, "m.json");
  EXPECT_FALSE(c.families.ur_distribution);
  EXPECT_EQ(c.notes.size(), 2u);
  const MonitorConfig tb = parse_monitor_config(
      json{{"ur_distribution", true}, {"format", "tensorboard"}}, "m.json");
  EXPECT_TRUE(tb.families.ur_distribution);
}

TEST(MonitorConfig, ZeroNdigitsAndCollectTimesAreMsprobes) {
  const MonitorConfig c =
      parse_monitor_config(json{{"ndigits", 0}, {"collect_times", 0}}, "m.json");
  EXPECT_EQ(c.output.ndigits, 6);
  EXPECT_EQ(c.schedule.collect_times, 1);
}

TEST(MonitorConfig, ABadValueIsOneLineNamingFileFieldValueAndWhatIsAllowed) {
  EXPECT_EQ(error_of(json{{"ndigits", 21}}),
            "monitor.json: ndigits: expected an integer from 1 to 20, got 21");
  EXPECT_EQ(error_of(json{{"xy_distribution", "yes"}}),
            "monitor.json: xy_distribution: expected true or false, got \"yes\"");
  EXPECT_EQ(error_of(json{{"ops", {"min", "p99"}}}),
            "monitor.json: ops[1]: expected one of norm, min, max, zeros, nans, id, mean, shape, "
            "dtype, got \"p99\"");
  EXPECT_EQ(error_of(json{{"step_interval", 0}}),
            "monitor.json: step_interval: expected an integer >= 1, got 0");
  EXPECT_EQ(error_of(json{{"format", "api"}}),
            "monitor.json: format: expected one of csv, tensorboard, got \"api\"");
}

TEST(MonitorConfig, EveryBadKeyIsToldAtOnce) {
  const std::string e =
      error_of(json{{"eps", -1}, {"module_ranks", {0, "1"}}, {"xy_distributon", true}});
  EXPECT_NE(e.find("monitor.json: eps: expected a number >= 0, got -1"), std::string::npos) << e;
  EXPECT_NE(e.find("monitor.json: module_ranks[1]: expected a rank"), std::string::npos) << e;
  EXPECT_NE(e.find("monitor.json: xy_distributon: unknown key; did you mean \"xy_distribution\"?"),
            std::string::npos)
      << e;
}

TEST(MonitorConfig, AlertRulesAreMsprobesTwo) {
  EXPECT_NE(error_of(json::parse(R"({"alert": {"rules": [{"rule_name": "AnomalyGrad"}]}})"))
                .find("alert.rules[0].rule_name: expected one of AnomalyTurbulence, AnomalyNan"),
            std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"alert": {"dump": true}})")).find("alert.rules"),
            std::string::npos);
  EXPECT_NE(error_of(json::parse(
                         R"({"alert": {"rules": [{"rule_name": "AnomalyNan",
                                                  "args": {"threshold": -1}}]}})"))
                .find("threshold: expected a number >= 0, got -1"),
            std::string::npos);
}

TEST(MonitorConfig, MegatronsLayerFeaturesAreRefusedWithTheReason) {
  const std::string e = error_of(json{{"recording_l2_features", true}});
  EXPECT_NE(e.find("recording_l2_features"), std::string::npos);
  EXPECT_NE(e.find("Megatron"), std::string::npos) << e;
  EXPECT_EQ(error_of(json{{"recording_l2_features", false}, {"l2_targets", json::object()}}), "");
}
