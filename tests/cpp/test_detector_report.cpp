// The report the detector's findings make (overflow_report.json's lists and details), and
// msprobe 1.1.1's own dumps judged by it.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/detector.h"
#include "core/report.h"
#include "test_util.h"

using namespace msprobe;
using namespace msprobe::testing;

namespace {

Detector make() {
  return Detector(RuleSet::shipped(), DetectorOptions{kDefaultMutationThreshold, false});
}

}  // namespace

// The expected report is not a copy of our own output: each row below is what the scene rules
// (docs/overflow-detection.md) make of its record, and nlohmann::json lays the report out, whose
// indent-1 dump is Python's json.dumps(indent=1). msprobe 1.1.1's AnomalyDetector gives these same
// anomaly_details for these records, and these lists once its inverted test in get_statistics is
// put right. The records are in neither name nor level order, so the order checked is theirs.
TEST(Report, ListsAndDetailsInRecordOrder) {
  struct Row {
    const char* call;
    const char* rank;
    const char* scene;
    std::vector<int> input_args;
    std::vector<std::string> input_kwargs;
    std::vector<int> outputs;
  };
  const std::vector<Row> rows = {
      // inf in the only input, finite output
      {"Torch.c.0.forward", "medium", "InputAnomalyOutputNormalScene", {0}, {}, {}},
      // finite input, inf output
      {"Torch.a.0.forward", "critical", "InputNormalOutputAnomalyScene", {}, {}, {0}},
      // all finite; the output norm is 1e9 times the input's, above the default threshold 1e5
      {"Torch.m.0.forward", "high", "NumericalMutationScene", {}, {}, {}},
      // finite input, NaN output
      {"Torch.b.0.forward", "critical", "InputNormalOutputAnomalyScene", {}, {}, {0}},
      // NaN in input 0, in keyword k and in the output
      {"Torch.h.0.forward", "high", "InputAnomalyOutputAnomalyScene", {0}, {"k"}, {0}},
  };
  const std::map<std::string, std::string> list_of = {{"critical", "critical_apis"},
                                                      {"high", "high_priority_apis"},
                                                      {"medium", "medium_priority_apis"}};
  nlohmann::ordered_json expected;
  for (const char* list :
       {"critical_apis", "high_priority_apis", "medium_priority_apis", "anomaly_details"}) {
    expected[list] = nlohmann::ordered_json::array();
  }
  for (const Row& row : rows) {
    expected[list_of.at(row.rank)].push_back(row.call);
    nlohmann::ordered_json detail;
    detail["api_name"] = row.call;
    detail["rank"] = row.rank;
    detail["scene_type"] = row.scene;
    detail["input_args_anomaly_indices"] = row.input_args;
    detail["input_kwargs_anomaly_keys"] = row.input_kwargs;
    detail["output_anomaly_indices"] = row.outputs;
    if (std::string(row.scene) == "NumericalMutationScene") {
      detail["threshold"] = 1e5;
      detail["scale_change_detected"] = true;
    }
    expected["anomaly_details"].push_back(detail);
  }

  Detector d = make();
  Report report;
  for (const CallRecord& r : records(
           {fwd("Torch.c.0.forward", inf_t(), clean()), fwd("Torch.a.0.forward", clean(), inf_t()),
            fwd("Torch.m.0.forward", norm_t("1.0"), norm_t("1e+9")),
            fwd("Torch.b.0.forward", clean(), nan_t()),
            fwd("Torch.h.0.forward", nan_t(), nan_t(), "\"k\": " + nan_t())})) {
    if (auto f = d.judge(r)) report.findings.add(*f);
  }
  EXPECT_EQ(report.to_json(1), expected.dump(1));
}

TEST(Report, EmptyReport) {
  EXPECT_EQ(
      Report{}.to_json(1),
      "{\n \"critical_apis\": [],\n \"high_priority_apis\": [],\n \"medium_priority_apis\": [],\n"
      " \"anomaly_details\": []\n}");
}

TEST(Fixtures, MsprobeOverflowDumpIsHigh) {
  Detector d = make();
  std::vector<Finding> found;
  read_dump_file(std::string(MSPROBE_FIXTURES_DIR) + "/mlp_overflow_check_L1/dump.json",
                 [&](CallRecord&& r) {
                   if (auto f = d.judge(r)) found.push_back(*f);
                 });
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].call, "Tensor.__mul__.1.forward");
  // Its input already carries msprobe's overflowed float32 Mean/Norm.
  EXPECT_EQ(found[0].scene, Scene::InputAnomalyOutputAnomaly);
  EXPECT_EQ(found[0].input_indices, std::vector<size_t>{0});
}

TEST(Fixtures, CleanMsprobeStatisticsDumpsHaveNoAnomaly) {
  for (const char* dir : {"mlp_statistics_L1", "mlp_statistics_mix"}) {
    Detector d = make();
    size_t n = 0;
    read_dump_file(std::string(MSPROBE_FIXTURES_DIR) + "/" + dir + "/dump.json",
                   [&](CallRecord&& r) { n += d.judge(r).has_value(); });
    EXPECT_EQ(n, 0u) << dir;
  }
}
