// The training monitor's alerts (issue 55): msprobe 26.2.0's rules as anomaly_processor.py and
// data_writers.py apply them (docs/monitor-reference.md §6), checked value by value, and the
// rows' TensorBoard tags.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/monitor_anomalies.h"
#include "core/monitor_events.h"

using namespace msprobe;

namespace {

MonitorAlertRule turbulence(double t) {
  MonitorAlertRule r;
  r.kind = MonitorAlertRule::Kind::Turbulence;
  r.threshold = t;
  return r;
}

MonitorAlertRule nan_rule() {
  MonitorAlertRule r;
  r.kind = MonitorAlertRule::Kind::Nan;
  return r;
}

MonitorRow row(int64_t step, std::vector<MonitorValue> values) {
  MonitorRow r;
  r.vpp_stage = "0";
  r.name = "fc1.bias";
  r.step = step;
  r.values = std::move(values);
  return r;
}

const std::vector<MonitorOp> kOps = {MonitorOp::Mean, MonitorOp::Max, MonitorOp::Nans,
                                     MonitorOp::Dtype};
const std::string kTag = "0:fc1.bias/rank0/acc_grad";

void scan(MonitorAnomalies& a, int64_t step, double mean, double max, int64_t nans) {
  a.scan(row(step, {MonitorValue::of_real(mean), MonitorValue::of_real(max),
                    MonitorValue::of_integer(nans), MonitorValue::of_text("torch.float16")}),
         kTag, kOps, 10, {"fc1", "Module.fc1.Linear.parameters.bias", "train.py:9"});
}

}  // namespace

TEST(MonitorAnomalies, TurbulenceJudgesAgainstTheMeanBeforeTheValue) {
  MonitorAnomalies a({turbulence(0.5)}, 0.5);
  scan(a, 0, 0.0015923626488074660, 1.0, 0);  // a first value never fires
  EXPECT_TRUE(a.take_lines().empty());
  scan(a, 1, -0.0037858885334571823, 50.0, 0);
  const std::vector<std::string> lines = a.take_lines();
  // The max jumped too, but a turbulence counts only of a norm or a mean.
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind(
                "> Rule AnomalyTurbulence reports anomaly signal in ('0:fc1.bias/rank0/acc_grad', "
                "'mean') at step 1, current value -0.0037858885334571823, history mean "
                "0.001592362648807466.",
                0),
            0u);
  const nlohmann::json file = nlohmann::json::parse(a.anomaly_json());
  const auto& entry = file.at("0:fc1.bias/rank0/acc_grad_step_1_call_10");
  EXPECT_EQ(entry.at("call_id"), 10);
  EXPECT_EQ(entry.at("group_mates"), nlohmann::json::array({0}));
}

TEST(MonitorAnomalies, TheMeanIsAnExponentialMeanOfMagnitudes) {
  MonitorAnomalies a({turbulence(0.0)}, 0.5);
  scan(a, 0, 2.0, 0, 0);
  scan(a, 1, -1.0, 0, 0);  // history 2.0: |-1| does not pass it
  scan(a, 2, 1.99, 0, 0);  // history 0.99 * 2 + 0.01 * 1 = 1.99: not above
  EXPECT_TRUE(a.take_lines().empty());
  scan(a, 3, 1.9901, 0, 0);  // history 0.99 * 1.99 + 0.01 * 1.99 = 1.99
  EXPECT_EQ(a.take_lines().size(), 1u);
}

TEST(MonitorAnomalies, NanFiresOnNanAndOverItsThresholdAndSaysAnIntegerMeanAsOne) {
  MonitorAlertRule over = nan_rule();
  over.threshold = 3;
  MonitorAnomalies a({over}, 0.5);
  scan(a, 0, std::nan(""), 1.0, 0);  // mean nan: fires even at the first value
  std::vector<std::string> lines = a.take_lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("'mean') at step 0, current value nan, history mean nan."),
            std::string::npos);
  scan(a, 1, 0.5, 1.0, 7);  // 7 NaNs > 3; the nans' mean began as the integer 0
  lines = a.take_lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("'nans') at step 1, current value 7, history mean 0."),
            std::string::npos);
}

TEST(MonitorAnomalies, TheContextSaysTheCallItsLineAndTheRangeUsed) {
  MonitorAnomalies a({nan_rule()}, 0.5);
  a.scan(row(0, {MonitorValue::of_real(std::nan("")), MonitorValue::of_real(-40000.0),
                 MonitorValue::of_integer(1), MonitorValue::of_text("torch.float16")}),
         kTag, kOps, 3, {"fc1", "Module.fc1.Linear.forward", "train.py:9"});
  const std::vector<std::string> lines = a.take_lines();
  ASSERT_EQ(lines.size(), 1u);
  const std::string said =
      "[Module.fc1.Linear.forward at train.py:9; 61% of float16's range, near its limit]";
  EXPECT_NE(lines[0].find(said), std::string::npos);
  const nlohmann::json context = nlohmann::json::parse(a.context_json());
  const auto& c = context.at("0:fc1.bias/rank0/acc_grad_step_0_call_3");
  EXPECT_EQ(c.at("dtype"), "torch.float16");
  EXPECT_DOUBLE_EQ(c.at("range_used").get<double>(), 40000.0 / 65504.0);
  EXPECT_TRUE(c.at("near_limit").get<bool>());
}

TEST(MonitorEvents, TagsAreMsprobesWithTheOpAndLeaveOutTexts) {
  EXPECT_EQ(monitor_family_tag("grad_unreduced"), "acc_grad");
  EXPECT_EQ(monitor_family_tag("grad_reduced"), "post_grad");
  EXPECT_EQ(monitor_family_tag("actv"), "actv");
  MonitorRowTable t;
  t.put("0:fc1.input:0", {MonitorValue::of_real(1.5), MonitorValue::of_real(2.0),
                          MonitorValue::of_integer(0), MonitorValue::of_text("torch.float32")});
  const std::string bytes = monitor_event_records(t, "/rank0/actv", kOps, 4, 1.0);
  EXPECT_NE(bytes.find("0:fc1.input:0/rank0/actv_mean"), std::string::npos);
  EXPECT_NE(bytes.find("0:fc1.input:0/rank0/actv_nans"), std::string::npos);
  EXPECT_EQ(bytes.find("actv_dtype"), std::string::npos);
}
