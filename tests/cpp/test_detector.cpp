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

Detector make(bool compat = false, const std::string& extra_rules = "") {
  RuleSet rules = RuleSet::shipped();
  if (!extra_rules.empty()) rules.add_yaml(extra_rules, "extra.yaml");
  return Detector(std::move(rules), DetectorOptions{kDefaultMutationThreshold, compat});
}

std::optional<Finding> judge_one(const std::string& entry, bool compat = false,
                                 const std::string& extra_rules = "") {
  Detector d = make(compat, extra_rules);
  return d.judge(record(entry));
}

// Runs every record through one detector, returning each verdict's scene name or "-".
std::vector<std::string> scenes(const std::vector<std::string>& entries, bool compat = false) {
  Detector d = make(compat);
  std::vector<std::string> out;
  for (const CallRecord& r : records(entries)) {
    auto f = d.judge(r);
    out.push_back(f ? scene_name(f->scene) : "-");
  }
  return out;
}

}  // namespace

// --- the four scenes ---

TEST(Scenes, CleanCallIsNotFlagged) {
  EXPECT_FALSE(judge_one(fwd("Torch.add.0.forward", clean() + ", " + clean(), clean())));
}

TEST(Scenes, InputNormalOutputAnomalyIsCritical) {
  auto f = judge_one(fwd("Torch.exp.0.forward", clean(), inf_t()));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->scene, Scene::InputNormalOutputAnomaly);
  EXPECT_EQ(f->severity, Severity::Critical);
  EXPECT_EQ(f->output_indices, std::vector<size_t>{0});
  EXPECT_TRUE(f->input_indices.empty());
}

TEST(Scenes, InputAnomalyOutputAnomalyIsHigh) {
  auto f = judge_one(fwd("Torch.exp.0.forward", nan_t(), nan_t()));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->scene, Scene::InputAnomalyOutputAnomaly);
  EXPECT_EQ(f->severity, Severity::High);
}

TEST(Scenes, InputAnomalyOutputNormalIsMedium) {
  auto f = judge_one(fwd("Torch.nan_to_num.0.forward", clean() + ", " + nan_t(), clean()));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->scene, Scene::InputAnomalyOutputNormal);
  EXPECT_EQ(f->severity, Severity::Medium);
  EXPECT_EQ(f->input_indices, std::vector<size_t>{1});
}

TEST(Scenes, NumericalMutationIsHigh) {
  auto f = judge_one(fwd("Torch.mul.0.forward", norm_t("2.0"), norm_t("2000000.0")));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->scene, Scene::NumericalMutation);
  EXPECT_EQ(f->severity, Severity::High);
  EXPECT_DOUBLE_EQ(f->threshold, 1e5);
}

TEST(Scenes, AnomaliesInKwargsAndNestedListsCount) {
  auto f = judge_one(fwd("Functional.layer_norm.0.forward", clean(), inf_t(),
                         "\"weight\": " + nan_t() + ", \"bias\": " + clean()));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->scene, Scene::InputAnomalyOutputAnomaly);
  EXPECT_EQ(f->kwarg_keys, std::vector<std::string>{"weight"});

  auto g = judge_one(fwd("Torch.cat.0.forward", "[" + clean() + ", [" + nan_t() + "]]", clean()));
  ASSERT_TRUE(g);
  EXPECT_EQ(g->scene, Scene::InputAnomalyOutputNormal);
  EXPECT_EQ(g->input_indices, std::vector<size_t>{0});

  auto h = judge_one(fwd("Torch.split.0.forward", clean(), "[" + clean() + ", " + inf_t() + "]"));
  ASSERT_TRUE(h);
  EXPECT_EQ(h->scene, Scene::InputNormalOutputAnomaly);
}

TEST(Scenes, EachStatisticFieldCountsAndNegativeInfinityToo) {
  EXPECT_TRUE(judge_one(fwd("Torch.f.0.forward", clean(), T("1.0", "-Infinity", "0.5", "1.0"))));
  EXPECT_TRUE(judge_one(fwd("Torch.f.0.forward", clean(), T("1.0", "0.0", "NaN", "1.0"))));
  EXPECT_TRUE(judge_one(fwd("Torch.f.0.forward", clean(), T("1.0", "0.0", "0.5", "Infinity"))));
  EXPECT_TRUE(judge_one(fwd("Torch.f.0.forward", clean(), T("\"INF\""))));
  // A string value "nan" of a str argument is text, not a number.
  EXPECT_FALSE(judge_one(fwd("Torch.f.0.forward", R"({"type": "str", "value": "nan"})", clean())));
}

// --- scene order: the first that matches wins ---

TEST(SceneOrder, AnomalyScenesComeBeforeMutation) {
  // Output anomaly plus a huge norm ratio: the anomaly scene is reported, not the mutation.
  auto f = judge_one(fwd("Torch.f.0.forward", norm_t("1.0"), T("Infinity", "0.0", "1.0", "1e+30")));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->scene, Scene::InputNormalOutputAnomaly);
  auto g = judge_one(fwd("Torch.f.0.forward", nan_t() + ", " + norm_t("1e-10"), norm_t("1e+30")));
  ASSERT_TRUE(g);
  EXPECT_EQ(g->scene, Scene::InputAnomalyOutputNormal);
}

TEST(SceneOrder, ScenesOfASequence) {
  EXPECT_EQ(
      scenes({fwd("Torch.a.0.forward", clean(), inf_t()),
              fwd("Torch.b.0.forward", inf_t(), inf_t()),
              fwd("Torch.c.0.forward", inf_t(), clean()),
              fwd("Torch.d.0.forward", norm_t("1e-3"), norm_t("1e+3")),
              fwd("Torch.e.0.forward", clean(), clean())}),
      (std::vector<std::string>{"InputNormalOutputAnomalyScene", "InputAnomalyOutputAnomalyScene",
                                "InputAnomalyOutputNormalScene", "NumericalMutationScene", "-"}));
}

// --- mutation edges ---

TEST(Mutation, ZeroMaxInputNormComparesOutputNormWithThreshold) {
  EXPECT_TRUE(
      numerical_mutation(record(fwd("T.z.0.forward", norm_t("0.0"), norm_t("100000.5"))), 1e5));
  EXPECT_FALSE(
      numerical_mutation(record(fwd("T.z.0.forward", norm_t("0.0"), norm_t("100000.0"))), 1e5));
  EXPECT_FALSE(numerical_mutation(record(fwd("T.z.0.forward", norm_t("0.0"), norm_t("5.0"))), 1e5));
}

TEST(Mutation, RatioExactlyAtThresholdIsNotFlagged) {
  EXPECT_FALSE(
      numerical_mutation(record(fwd("T.r.0.forward", norm_t("2.0"), norm_t("200000.0"))), 1e5));
  EXPECT_TRUE(
      numerical_mutation(record(fwd("T.r.0.forward", norm_t("2.0"), norm_t("200000.0001"))), 1e5));
  EXPECT_FALSE(judge_one(fwd("T.r.0.forward", norm_t("2.0"), norm_t("200000.0"))));
}

TEST(Mutation, NaNNormsAreSkipped) {
  // A NaN among the input norms would poison max(); msprobe 1.1.1 drops it.
  EXPECT_TRUE(numerical_mutation(
      record(fwd("T.n.0.forward", norm_t("NaN") + ", " + norm_t("2.0"), norm_t("300000.0"))), 1e5));
  EXPECT_TRUE(numerical_mutation(
      record(fwd("T.n.0.forward", norm_t("1e-05"), norm_t("NaN") + ", " + norm_t("10.0"))), 1e5));
  EXPECT_FALSE(
      numerical_mutation(record(fwd("T.n.0.forward", norm_t("NaN"), norm_t("1e+30"))), 1e5));
}

TEST(Mutation, OnlyTopLevelTensorsWithNormsCount) {
  // Scalars, nested lists and missing norms are not in the norm lists.
  EXPECT_FALSE(numerical_mutation(
      record(fwd("T.m.0.forward", F("1e-30") + ", [" + norm_t("1e-30") + "]", norm_t("1.0"))),
      1e5));
  EXPECT_FALSE(numerical_mutation(record(fwd("T.m.0.forward", "", norm_t("1e+30"))), 1e5));
  EXPECT_FALSE(numerical_mutation(record(fwd("T.m.0.forward", norm_t("1e-30"), "")), 1e5));
  // kwargs tensors are inputs.
  EXPECT_TRUE(numerical_mutation(
      record(fwd("T.m.0.forward", "", norm_t("1e+10"), "\"w\": " + norm_t("1.0"))), 1e5));
  // The maxima are compared, not each pair.
  EXPECT_FALSE(numerical_mutation(
      record(fwd("T.m.0.forward", norm_t("1e-10") + ", " + norm_t("1.0"), norm_t("1000.0"))), 1e5));
}

TEST(Mutation, ThresholdOption) {
  Detector d(RuleSet::shipped(), DetectorOptions{10.0, false});
  auto f = d.judge(record(fwd("T.t.0.forward", norm_t("1.0"), norm_t("11.0"))));
  ASSERT_TRUE(f);
  EXPECT_DOUBLE_EQ(f->threshold, 10.0);
}

// --- ignore filter ---

TEST(Filter, ShippedRuleWithOnlyOutputIndices) {
  // torch.empty: output 0 may hold garbage.
  EXPECT_FALSE(judge_one(fwd("Torch.empty.0.forward", R"({"type": "int", "value": 4})", nan_t())));
  // A second anomalous output is not covered.
  EXPECT_TRUE(judge_one(fwd("Torch.empty.0.forward", "", nan_t() + ", " + nan_t())));
  // Quirk: input categories are not listed, so an anomalous input does not stop the rule.
  EXPECT_FALSE(judge_one(fwd("Torch.empty.0.forward", nan_t(), nan_t())));
  // The name match is on the first two parts, lower-cased; other APIs are untouched.
  EXPECT_FALSE(judge_one(fwd("torch.EMPTY.3.forward", "", nan_t())));
  EXPECT_TRUE(judge_one(fwd("Torch.empty_likeness.0.forward", "", nan_t())));
}

TEST(Filter, RuleWithInputIndexOnlyDoesNotCheckOutputs) {
  // tensor.masked_fill_ ignores input 0; outputs are not a listed category.
  EXPECT_FALSE(judge_one(fwd("Tensor.masked_fill_.0.forward", inf_t() + ", " + clean(), inf_t())));
  EXPECT_FALSE(judge_one(fwd("Tensor.masked_fill_.0.forward", clean() + ", " + clean(), inf_t())));
  EXPECT_TRUE(judge_one(fwd("Tensor.masked_fill_.0.forward", clean() + ", " + nan_t(), inf_t())));
  // Not the out-of-place masked_fill.
  EXPECT_TRUE(judge_one(fwd("Tensor.masked_fill.0.forward", inf_t() + ", " + clean(), inf_t())));
}

TEST(Filter, KwargsByName) {
  // distributed.recv ignores input index 0 and kwarg "tensor".
  EXPECT_FALSE(judge_one(fwd("Distributed.recv.0.forward", "", clean(), "\"tensor\": " + nan_t())));
  EXPECT_TRUE(judge_one(fwd("Distributed.recv.0.forward", "", clean(), "\"src\": " + F("NaN"))));
  EXPECT_TRUE(judge_one(fwd("Distributed.recv.0.forward", "", clean(),
                            "\"tensor\": " + nan_t() + ", \"group\": " + nan_t())));
  EXPECT_FALSE(judge_one(fwd("Distributed.recv.0.forward", nan_t(), clean())));
}

// Issue 42: the received data is a collective's output; a rule about the buffer's old contents
// does not excuse NaN/inf that arrived from a peer (outside compat mode).
TEST(Filter, WhatACollectiveReceivedIsNotExcusedByItsBufferRule) {
  const std::string received = fwd("Distributed.recv.0.forward", clean(), nan_t());
  auto f = judge_one(received);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->scene, Scene::InputNormalOutputAnomaly);
  EXPECT_TRUE(judge_one(
      fwd("Distributed.all_gather_into_tensor.0.forward", clean() + ", " + clean(), inf_t())));
  EXPECT_FALSE(judge_one(received, true));  // compat: msprobe 1.1.1's filter, vacuous as it is
}

TEST(Filter, NestedListsAreIgnoredByTheFilterButSeenByTheScenes) {
  // all_gather ignores input 0. Input 1 is a list holding NaN: the scene sees an input anomaly,
  // but msprobe 1.1.1's filter does not look into lists, so the rule still covers the call.
  const std::string rec =
      fwd("Distributed.all_gather.0.forward", "[" + nan_t() + "], [" + nan_t() + "]", clean());
  EXPECT_FALSE(judge_one(rec));
  // Without the rule the call is flagged as medium.
  auto f = judge_one(fwd("Distributed.all_gather_object.0.forward",
                         "[" + nan_t() + "], [" + nan_t() + "]", clean()));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->input_indices, (std::vector<size_t>{0, 1}));
  // A top-level anomaly at a non-ignored index is not covered.
  EXPECT_TRUE(
      judge_one(fwd("Distributed.all_gather.0.forward", "[" + nan_t() + "], " + nan_t(), clean())));
}

TEST(Filter, BackwardRecordsUseTheirInputKey) {
  EXPECT_FALSE(judge_one(bwd("Tensor.masked_fill_.0.backward", nan_t(), clean())));
  EXPECT_TRUE(judge_one(bwd("Tensor.masked_fill_.0.backward", clean() + ", " + nan_t(), clean())));
}

TEST(Filter, DuplicateApiNameKeepsTheFirstRule) {
  const std::string rules = R"(
ignore_nan_inf:
  - api_name: "torch.sqrt"
    output_ignore: [{index: 0}]
  - api_name: "torch.sqrt"
    output_ignore: [{index: 1}]
)";
  EXPECT_FALSE(judge_one(fwd("Torch.sqrt.0.forward", clean(), nan_t()), false, rules));
  EXPECT_TRUE(
      judge_one(fwd("Torch.sqrt.0.forward", clean(), clean() + ", " + nan_t()), false, rules));
  // A user rule cannot replace a shipped one either: torch.empty keeps output index 0 only.
  const std::string override_empty = R"(
ignore_nan_inf:
  - api_name: "torch.empty"
    output_ignore: [{index: 0}, {index: 1}]
)";
  EXPECT_TRUE(
      judge_one(fwd("Torch.empty.0.forward", "", nan_t() + ", " + nan_t()), false, override_empty));
}

TEST(Filter, EmptyApiNameAndRulesWithoutPositionsAreSkipped) {
  RuleSet set;
  set.add_yaml(R"(
ignore_nan_inf:
  - api_name: ""
    output_ignore: [{index: 0}]
  - api_name: "torch.exp"
    description: "no positions at all"
  - api_name: "torch.log"
    input_ignore: []
    output_ignore: []
  - api_name: "torch.sin"
    output_ignore: [{index: 0}]
)",
               "r.yaml");
  EXPECT_EQ(set.size(), 1u);
  EXPECT_NE(set.find("torch.sin"), nullptr);
  Detector d(std::move(set), DetectorOptions{});
  EXPECT_TRUE(d.judge(record(fwd("Torch.exp.0.forward", clean(), nan_t()))));
  EXPECT_TRUE(d.judge(record(fwd("Torch.log.0.forward", clean(), nan_t()))));
  EXPECT_TRUE(d.judge(record(fwd(".0.forward", clean(), nan_t()))));
  EXPECT_FALSE(d.judge(record(fwd("Torch.sin.0.forward", clean(), nan_t()))));
}

TEST(Filter, AppliesToMutationFindingsToo) {
  const std::string rules = R"(
ignore_nan_inf:
  - api_name: "torch.mul"
    output_ignore: [{index: 0}]
)";
  EXPECT_TRUE(judge_one(fwd("Torch.mul.0.forward", norm_t("1.0"), norm_t("1e+9"))));
  EXPECT_FALSE(judge_one(fwd("Torch.mul.0.forward", norm_t("1.0"), norm_t("1e+9")), false, rules));
}

TEST(Filter, NonFiniteScalarsCountInTheFilterOutsideCompat) {
  const std::string rules = R"(
ignore_nan_inf:
  - api_name: "tensor.fill_"
    input_ignore: [{index: 0}]
)";
  const std::string rec = fwd("Tensor.fill_.0.forward", clean() + ", " + F("NaN"), nan_t());
  // Default: the NaN fill value at index 1 is anomalous and not ignored.
  EXPECT_TRUE(judge_one(rec, false, rules));
  // Compat: the scalar does not count, so the rule covers the call.
  EXPECT_FALSE(judge_one(rec, true, rules));
}

// --- product defaults vs compat (docs/overflow-detection.md) ---

TEST(Compat, CausalMaskFillWithMinusInfinity) {
  // x.masked_fill(mask, float("-inf")): the output holds -inf by design.
  const std::string mask = R"({"type": "torch.Tensor", "dtype": "torch.bool", "shape": [4, 4],
      "Max": true, "Min": false, "Mean": null, "Norm": null, "requires_grad": false})";
  const std::string out = T("3.0", "-Infinity", "-Infinity", "Infinity");
  const std::string rec =
      fwd("Tensor.masked_fill.0.forward", clean() + ", " + mask + ", " + F("-Infinity"), out);
  auto def = judge_one(rec, false);
  ASSERT_TRUE(def);
  EXPECT_EQ(def->scene, Scene::InputAnomalyOutputAnomaly);
  EXPECT_EQ(def->severity, Severity::High);
  EXPECT_EQ(def->input_indices, std::vector<size_t>{2});
  auto compat = judge_one(rec, true);
  ASSERT_TRUE(compat);
  EXPECT_EQ(compat->scene, Scene::InputNormalOutputAnomaly);
  EXPECT_EQ(compat->severity, Severity::Critical);
  EXPECT_TRUE(compat->input_indices.empty());
  // The softmax that consumes the mask is medium either way.
  for (bool c : {false, true}) {
    auto s = judge_one(fwd("Functional.softmax.0.forward", out, clean()), c);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->severity, Severity::Medium);
  }
}

TEST(Compat, NanFedCrossEntropyBackwardInheritsItsForward) {
  const std::vector<std::string> recs = {
      fwd("Functional.cross_entropy.0.forward", nan_t() + ", " + clean(), nan_t()),
      bwd("Functional.cross_entropy.0.backward", T("1.0", "1.0", "1.0", "1.0"), nan_t())};
  EXPECT_EQ(scenes(recs, false), (std::vector<std::string>{"InputAnomalyOutputAnomalyScene",
                                                           "InputAnomalyOutputAnomalyScene"}));
  EXPECT_EQ(scenes(recs, true), (std::vector<std::string>{"InputAnomalyOutputAnomalyScene",
                                                          "InputNormalOutputAnomalyScene"}));
}

TEST(Compat, InheritanceCoversModulesAndForwardOutputsAndResets) {
  // A forward with only an output anomaly still taints its backward.
  const std::vector<std::string> recs = {fwd("Module.fc1.Linear.forward.0", clean(), inf_t()),
                                         fwd("Torch.sqrt.0.forward", clean(), clean()),
                                         bwd("Torch.sqrt.0.backward", clean(), inf_t()),
                                         bwd("Module.fc1.Linear.backward.0", clean(), inf_t())};
  EXPECT_EQ(scenes(recs), (std::vector<std::string>{"InputNormalOutputAnomalyScene", "-",
                                                    "InputNormalOutputAnomalyScene",
                                                    "InputAnomalyOutputAnomalyScene"}));
  Detector d = make();
  auto parsed = records(recs);
  d.judge(parsed[0]);
  d.reset();
  auto f = d.judge(parsed[3]);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->scene, Scene::InputNormalOutputAnomaly);
}

// A backward seen twice (retain_graph) inherits both times in the live guard; a dump file names a
// call once, and check forgets the forward at its backward.
TEST(Compat, InheritanceOnceOrAlwaysAsNamesAreUniqueOrNot) {
  const auto parsed = records({fwd("Torch.exp.0.forward", clean(), inf_t()),
                               bwd("Torch.exp.0.backward", clean(), inf_t())});
  for (const bool unique : {false, true}) {
    Detector d(RuleSet::shipped(), DetectorOptions{kDefaultMutationThreshold, false, unique});
    d.judge(parsed[0]);
    for (int seen = 0; seen < 2; ++seen) {
      const auto f = d.judge(parsed[1]);
      ASSERT_TRUE(f);
      const bool inherits = !unique || seen == 0;
      EXPECT_EQ(f->scene,
                inherits ? Scene::InputAnomalyOutputAnomaly : Scene::InputNormalOutputAnomaly)
          << unique << seen;
    }
  }
}

TEST(Compat, ScalarOutputsCountOutsideCompat) {
  // Tensor.item() returning inf.
  auto f = judge_one(fwd("Tensor.item.0.forward", clean(), F("Infinity")), false);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->severity, Severity::Critical);
  EXPECT_FALSE(judge_one(fwd("Tensor.item.0.forward", clean(), F("Infinity")), true));
}

// --- report ---

TEST(Filter, EveryShippedRuleDropsWhatItShould) {
  const std::vector<std::string> cases = {
      fwd("Torch.empty.0.forward", R"({"type": "int", "value": 4})", nan_t()),
      fwd("Torch.empty_like.0.forward", clean(), nan_t()),
      fwd("Torch.empty_strided.0.forward", "", inf_t()),
      fwd("Distributed.recv.0.forward", nan_t(), clean()),
      fwd("Distributed.recv.1.forward", "", clean(), "\"tensor\": " + nan_t()),
      fwd("Distributed.all_gather.1.forward", nan_t() + ", " + clean(), clean()),
      fwd("Distributed.reduce_scatter.0.forward", nan_t(), clean()),
      fwd("Distributed.reduce_scatter.1.forward", "", clean(), "\"output\": " + nan_t()),
      fwd("Distributed._reduce_scatter_base.0.forward", nan_t() + ", " + clean(), clean()),
      fwd("Distributed.all_gather_into_tensor.0.forward", nan_t() + ", " + clean(), clean()),
      fwd("Distributed.reduce_scatter_tensor.0.forward", nan_t() + ", " + clean(), clean()),
      fwd("Tensor.masked_fill_.0.forward", inf_t() + ", " + clean() + ", " + F("1.0"), inf_t())};
  Detector shipped = make();
  Detector bare(RuleSet{}, DetectorOptions{});
  for (const CallRecord& r : records(cases)) {
    EXPECT_TRUE(bare.judge(r)) << r.name;
    EXPECT_FALSE(shipped.judge(r)) << r.name;
  }
}

TEST(Detector, AnAnomalyInsideAMappingOutputIsFound) {
  // A ModelOutput whose loss is NaN: the record's only output is a mapping.
  auto f = judge_one(fwd("Module.model.LlamaForCausalLM.forward.0", clean(),
                         R"({"loss": )" + inf_t() + R"(, "logits": null})"));
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->scene, Scene::InputNormalOutputAnomaly);
  EXPECT_EQ(f->output_indices, std::vector<size_t>{0});
}
