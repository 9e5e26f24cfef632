// monitor-plot's reading of a training monitor's run (issue 55): curves by file kind and row,
// steps in order across files, micro steps apart, alerts placed by msprobe's tag names.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <cmath>
#include <string>

#include "core/monitor_plot.h"
#include "test_util.h"

using namespace msprobe;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

}  // namespace

TEST(MonitorPlot, ReadsEachRowsCurveInStepOrderAndPlacesTheAlerts) {
  const msprobe::testing::TempDir tmp;
  const fs::path run = tmp.path() / "Dec06_06-45-53-rank3-aa8bd87d";
  const std::string header = "vpp_stage,name,step,micro_step,norm,shape,dtype\n";
  write(run / "actv_10-10.csv", header + "0,fc1.output,10,0,5.0,[8],torch.float32\n");
  write(run / "actv_2-2.csv", header + "0,fc1.output,2,0,3.0,[8],torch.float32\n" +
                                  "0,fc1.output,2,1,nan,[8],torch.float32\n");
  write(tmp.path() / "anomaly_detected" / "rank3" / "anomaly.json",
        R"({"k": {"step": 10, "tag_name": "0:fc1.output:0/rank3/actv"}})");
  EXPECT_EQ(monitor_run_folders(tmp.path().string()), std::vector<std::string>{run.string()});
  EXPECT_EQ(monitor_alerts_file(run.string()),
            (tmp.path() / "anomaly_detected" / "rank3" / "anomaly.json").string());
  std::vector<MonitorCurve> curves = read_monitor_curves(run.string(), "norm");
  ASSERT_EQ(curves.size(), 2u);
  EXPECT_EQ(curves[0].name, "fc1.output");
  EXPECT_EQ(curves[0].steps, (std::vector<int64_t>{2, 10}));
  EXPECT_EQ(curves[0].values, (std::vector<double>{3.0, 5.0}));
  EXPECT_EQ(curves[1].name, "fc1.output:1");
  EXPECT_TRUE(std::isnan(curves[1].values[0]));
  mark_monitor_alerts(curves, monitor_alerts_file(run.string()));
  EXPECT_EQ(curves[0].alerts, std::vector<int64_t>{10});
  EXPECT_TRUE(curves[1].alerts.empty());
}

TEST(MonitorPlot, AFolderNameWithoutARankHasNoAlertsFile) {
  EXPECT_EQ(monitor_alerts_file("/tmp/some_run"), "");
}
