// The streamed check report: the bytes Report::write makes, at any depth of the document, with
// none, one or many findings of each level.
#include <gtest/gtest.h>

#include "core/report.h"
#include "core/spilled_report.h"

namespace msprobe {
namespace {

Finding finding(const std::string& call, Severity s,
                Scene scene = Scene::InputNormalOutputAnomaly) {
  Finding f;
  f.call = call;
  f.severity = s;
  f.scene = scene;
  f.output_indices = {0};
  if (scene == Scene::NumericalMutation) {
    f.threshold = 1e5;
    f.input_norm = 1.0;
    f.output_norm = 2e6;
  }
  return f;
}

std::string spilled(const std::vector<Finding>& findings, bool in_a_folder) {
  SpilledReport report(1, in_a_folder ? 1 : 0);
  for (const Finding& f : findings) report.add(f);
  JsonWriter w(1);
  std::string text;
  if (in_a_folder) {
    w.begin_object();
    w.key("a/dump.json");
  }
  report.write(w, [&](const std::string& chunk) { text += chunk; });
  if (in_a_folder) w.end_object();
  return text + w.take();
}

std::string in_memory(const std::vector<Finding>& findings, bool in_a_folder) {
  Report report;
  report.findings = findings;
  JsonWriter w(1);
  if (in_a_folder) {
    w.begin_object();
    w.key("a/dump.json");
  }
  report.write(w);
  if (in_a_folder) w.end_object();
  return w.take();
}

TEST(SpilledReport, WritesTheBytesOfTheInMemoryReport) {
  const std::vector<std::vector<Finding>> cases = {
      {},
      {finding("Torch.exp.0.forward", Severity::Critical)},
      {finding("Torch.exp.0.forward", Severity::Critical),
       finding("Functional.softmax.0.forward", Severity::Medium),
       finding("Tensor.__mul__.1.forward", Severity::High),
       finding("Torch.matmul.0.forward", Severity::High, Scene::NumericalMutation),
       finding("Torch.exp.1.forward", Severity::Critical)},
  };
  for (bool folder : {false, true}) {
    for (const auto& findings : cases) {
      EXPECT_EQ(spilled(findings, folder), in_memory(findings, folder)) << findings.size();
    }
  }
}

TEST(SpilledReport, FailsAtOrAboveTheLevel) {
  SpilledReport report(1, 0);
  EXPECT_FALSE(report.fails(Severity::Medium));
  report.add(finding("Tensor.add.0.forward", Severity::High));
  EXPECT_TRUE(report.fails(Severity::Medium));
  EXPECT_TRUE(report.fails(Severity::High));
  EXPECT_FALSE(report.fails(Severity::Critical));
}

}  // namespace
}  // namespace msprobe

namespace msprobe {
namespace {

// --fail-on L fails on a finding at L or above, never below: one rule for the JSON and the text
// report (both hold a SeverityCounts).
TEST(SeverityCounts, FailOnCountsItsOwnLevelAndTheLevelsAbove) {
  SeverityCounts counts;
  EXPECT_FALSE(counts.fails(Severity::Medium));
  counts.add(Severity::High);
  EXPECT_TRUE(counts.fails(Severity::Medium));
  EXPECT_TRUE(counts.fails(Severity::High));
  EXPECT_FALSE(counts.fails(Severity::Critical));
  counts.add(Severity::Critical);
  EXPECT_TRUE(counts.fails(Severity::Critical));
  EXPECT_EQ(counts.total(), 2u);
  EXPECT_EQ(severity_summary(counts), "2 anomalous calls (1 critical, 1 high, 0 medium)");
}

}  // namespace
}  // namespace msprobe
