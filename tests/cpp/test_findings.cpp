// The one report model, Findings: spilled or in memory, it hands its findings back whole and in
// record order, and the JSON renderer writes the same bytes from either, at any depth of the
// document and across any number of chunks.
#include <gtest/gtest.h>

#include <cmath>

#include "core/findings.h"
#include "core/report.h"

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

// A document holding the report, written through a sink as check writes it, or at once.
std::string rendered(Findings findings, bool in_a_folder, bool through_a_sink) {
  const Report report{std::move(findings), std::nullopt, std::nullopt, std::nullopt, std::nullopt};
  JsonWriter w(1);
  std::string text;
  if (in_a_folder) {
    w.begin_object();
    w.key("a/dump.json");
  }
  if (through_a_sink) {
    report.write(w, [&](const std::string& chunk) { text += chunk; });
  } else {
    report.write(w);
  }
  if (in_a_folder) w.end_object();
  return text + w.take();
}

std::vector<Finding> mixed(size_t n) {
  std::vector<Finding> all;
  const Severity levels[] = {Severity::Critical, Severity::Medium, Severity::High};
  for (size_t i = 0; i < n; ++i) {
    all.push_back(finding("Torch.op" + std::to_string(i) + ".0.forward", levels[i % 3],
                          i % 7 == 0 ? Scene::NumericalMutation : Scene::InputNormalOutputAnomaly));
  }
  return all;
}

Findings spilled(const std::vector<Finding>& all) {
  Findings findings = Findings::spilled();
  for (const Finding& f : all) findings.add(f);
  return findings;
}

TEST(Findings, SpilledAndInMemoryRenderTheSameBytes) {
  // 5000 findings cross both the spill file's 64 KiB chunks and the renderer's.
  for (size_t n : {0, 1, 5, 5000}) {
    const std::vector<Finding> all = mixed(n);
    const std::string expected = rendered(Findings(all), false, false);
    for (bool folder : {false, true}) {
      EXPECT_EQ(rendered(spilled(all), folder, true), rendered(Findings(all), folder, false)) << n;
    }
    EXPECT_EQ(rendered(spilled(all), false, true), expected);
  }
}

TEST(Findings, TheRenderedListsAndDetailsAreInRecordOrder) {
  Findings findings;
  findings.add(finding("Torch.exp.0.forward", Severity::Critical));
  findings.add(finding("Functional.softmax.0.forward", Severity::Medium));
  findings.add(finding("Tensor.__mul__.1.forward", Severity::High));
  findings.add(finding("Torch.exp.1.forward", Severity::Critical));
  const std::string json = rendered(std::move(findings), false, false);
  EXPECT_NE(
      json.find("\"critical_apis\": [\n  \"Torch.exp.0.forward\",\n  \"Torch.exp.1.forward\"\n ]"),
      std::string::npos)
      << json;
  EXPECT_LT(json.find("\"api_name\": \"Functional.softmax.0.forward\""),
            json.find("\"api_name\": \"Tensor.__mul__.1.forward\""));
}

TEST(Findings, ASpilledFindingComesBackWithEveryField) {
  Finding f;
  f.call = std::string("Tensor.weird\tname\n\0.0.backward", 31);
  f.scene = Scene::NumericalMutation;
  f.severity = Severity::High;
  f.input_indices = {0, 3, 70000000000};
  f.uses_input_key = true;
  f.kwarg_keys = {"out", "", std::string(70000, 'k')};
  f.output_indices = {1, 2};
  f.threshold = 1e5;
  f.input_norm = 0.1;
  f.output_norm = -0.0;
  Findings findings = Findings::spilled();
  for (int i = 0; i < 3; ++i) findings.add(f);
  int seen = 0;
  findings.for_each([&](const Finding& back) {
    ++seen;
    EXPECT_EQ(back.call, f.call);
    EXPECT_EQ(back.scene, f.scene);
    EXPECT_EQ(back.severity, f.severity);
    EXPECT_EQ(back.input_indices, f.input_indices);
    EXPECT_EQ(back.uses_input_key, f.uses_input_key);
    EXPECT_EQ(back.kwarg_keys, f.kwarg_keys);
    EXPECT_EQ(back.output_indices, f.output_indices);
    EXPECT_EQ(back.threshold, f.threshold);
    EXPECT_EQ(back.input_norm, f.input_norm);
    EXPECT_TRUE(std::signbit(back.output_norm));
  });
  EXPECT_EQ(seen, 3);
}

TEST(Findings, CountsAndNamesTheFirstCallOfEachLevel) {
  for (bool spill : {false, true}) {
    Findings findings = spill ? Findings::spilled() : Findings();
    EXPECT_TRUE(findings.empty());
    EXPECT_FALSE(findings.counts().fails(Severity::Medium));
    findings.add(finding("Tensor.add.0.forward", Severity::High));
    findings.add(finding("Torch.exp.0.forward", Severity::Critical));
    findings.add(finding("Tensor.add.1.forward", Severity::High));
    EXPECT_EQ(findings.first(Severity::High), "Tensor.add.0.forward");
    EXPECT_EQ(findings.first(Severity::Critical), "Torch.exp.0.forward");
    EXPECT_FALSE(findings.first(Severity::Medium));
    EXPECT_EQ(findings.counts().total(), 3u);
    EXPECT_EQ(findings.counts().by_level[static_cast<int>(Severity::High)], 2u);
  }
}

// --fail-on L fails on a finding at L or above, never below: one rule for the JSON and the text
// report, which read the same Findings.
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
