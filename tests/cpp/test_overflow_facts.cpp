#include "core/overflow_facts.h"

#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"

namespace msprobe {
namespace {

using namespace msprobe::testing;

ArgFacts tensor(const std::string& position, int64_t nan, int64_t posinf, int64_t neginf) {
  ArgFacts a;
  a.position = position;
  a.type = "torch.Tensor";
  a.dtype = "torch.float16";
  a.shape = {8, 4};
  a.counted = true;
  a.nan = nan;
  a.posinf = posinf;
  a.neginf = neginf;
  return a;
}

OverflowFacts op_stop(const std::string& call) {
  OverflowFacts f;
  f.finding.call = call;
  f.finding.output_indices = {0};
  f.origin = Origin::Op;
  return f;
}

std::vector<std::string> texts(const std::vector<ArgFacts>& args) {
  std::vector<std::string> out;
  for (const ArgFacts& a : args) out.push_back(a.text());
  return out;
}

TEST(OverflowFactsTest, ArgumentTexts) {
  EXPECT_EQ(tensor("output[0]", 0, 12, 0).text(),
            "output[0]: torch.float16 [8, 4]: 0 NaN, 12 +inf, 0 -inf");
  ArgFacts uncounted = tensor("input_args[1]", 0, 0, 0);
  uncounted.counted = false;
  uncounted.shape = {};
  EXPECT_EQ(uncounted.text(), "input_args[1]: torch.float16 []");
  ArgFacts scalar;
  scalar.position = "input_args[2]";
  scalar.type = "float";
  scalar.value = -std::numeric_limits<double>::infinity();
  EXPECT_FALSE(scalar.is_tensor());
  EXPECT_EQ(scalar.text(), "input_args[2]: float -Infinity");  // as the report writes the value
  scalar.value.reset();
  EXPECT_EQ(scalar.text(), "input_args[2]: float");
}

TEST(OverflowFactsTest, AStopWithNoFactsStillSaysWhereToLook) {
  OverflowFacts f;
  f.finding.call = "Torch.add.0.forward";
  f.step = 3;
  f.rank = 1;
  EXPECT_EQ(f.message(),
            "msprobe_cpp: overflow at step 3, rank 1: Torch.add.0.forward (critical, "
            "InputNormalOutputAnomalyScene)\n"
            "  module: (none recorded)\n"
            "  source: (no Python frame)\n"
            "  dump:   none (overflow_nums reached: no more dumps are written)");
}

TEST(OverflowFactsTest, OriginWords) {
  OverflowFacts f;
  f.origin = Origin::Op;
  EXPECT_EQ(f.origin_words(), "op (this call made NaN/inf from finite inputs)");
  f.origin = Origin::Input;
  EXPECT_EQ(f.origin_words(),
            "input (NaN/inf came in with a tensor argument that no call of this step made: the "
            "batch?)");
  f.origin = Origin::Parameter;
  EXPECT_EQ(f.origin_words(), "parameter (NaN/inf came in with parameter ?)");
  f.parameter = "fc.weight";
  EXPECT_EQ(f.origin_words(), "parameter (NaN/inf came in with parameter fc.weight)");
  f.optimizer_state = "exp_avg_sq";
  EXPECT_EQ(f.origin_words(),
            "parameter (NaN/inf came in with the optimizer's state: exp_avg_sq of parameter "
            "fc.weight)");
  f.origin = Origin::Peer;
  EXPECT_EQ(f.origin_words(), "peer (NaN/inf came from another rank through this collective)");
}

TEST(OverflowFactsTest, HistoryDumpSourceAndLaterLines) {
  OverflowFacts f;
  f.history = HeadroomTrend{"torch.float16", {{6, 0.5, 32752.0}, {7, 0.904, 59000.0}}, "grew"};
  EXPECT_EQ(f.history_text(), "step 6 50%, step 7 90% of float16's range: grew");
  f.dump.dir = "/d/step3/rank0";
  EXPECT_EQ(f.dump_words(), "/d/step3/rank0  (overflow_report.json, dump.json, dump_tensor_data/)");
  f.dump.tensor_files = false;  // a step no call of which kept its tensors
  EXPECT_EQ(f.dump_words(), "/d/step3/rank0  (overflow_report.json, dump.json)");
  f.dump.error = "No space left on device";
  EXPECT_EQ(f.dump_words(), "not written: No space left on device");
  f.source = "train.py:9: y = x.exp()";
  EXPECT_EQ(f.source_line(), "source: train.py:9: y = x.exp()");
  f.source = "<eval_with_key>.3:5: mul = x * y";
  EXPECT_EQ(f.source_line().rfind("source: <eval_with_key>.3:5: mul = x * y\n  compiled: ", 0),
            0u);
  EXPECT_EQ(f.raised_calls_later_line(), "");
  f.raised_calls_later = 1;
  EXPECT_EQ(f.raised_calls_later_line().rfind("raised 1 call later: statistics come back", 0), 0u);
  f.raised_calls_later = 3;
  EXPECT_EQ(f.raised_calls_later_line().rfind("raised 3 calls later: ", 0), 0u);
}

TEST(OverflowFactsTest, GradientsLineNamesEightAndCountsTheRest) {
  OverflowFacts f;
  EXPECT_EQ(f.gradients_line(), "");
  f.gradients.parameters = {"a", "b"};
  EXPECT_EQ(f.gradients_line(), "non-finite gradients: a, b");
  f.gradients.parameters = {"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"};
  EXPECT_EQ(f.gradients_line(), "non-finite gradients: p0, p1, p2, p3, p4, p5, p6, p7");
  f.gradients.parameters.push_back("p8");
  f.gradients.parameters.push_back("p9");
  EXPECT_EQ(f.gradients_line(),
            "non-finite gradients: p0, p1, p2, p3, p4, p5, p6, p7 (and 2 more)");
}

TEST(OverflowFactsTest, AnOpThatMadeNaNFromCleanInputsIsOfferedAnIgnoreRule) {
  OverflowFacts f = op_stop("Torch.log.0.forward");
  EXPECT_EQ(f.intended_line(),
            "intended? an ignore rule in a file named by overflow_check.rules silences it:\n"
            "    ignore_nan_inf:\n"
            "      - api_name: \"torch.log\"\n"
            "        output_ignore:\n"
            "          - index: 0\n"
            "    (it silences every Torch.log call in the model whose output[0] holds NaN/inf, not "
            "only this one: msprobe's rules name an API, not a call site)");
}

TEST(OverflowFactsTest, AModulesIgnoreRuleSaysItCoversTheModulesInside) {
  OverflowFacts f = op_stop("Module.fc1.Linear.forward.0");
  f.finding.output_indices = {0, 2};
  EXPECT_EQ(f.ignore_rule_snippet(),
            "    ignore_nan_inf:\n"
            "      - api_name: \"module.fc1\"\n"
            "        output_ignore:\n"
            "          - index: 0\n"
            "          - index: 2\n"
            "    (it silences every module call named Module.fc1.* -- fc1 and every module inside "
            "it -- whose output[0], output[2] holds NaN/inf: msprobe's rules name a call by its "
            "first two parts)");
}

TEST(OverflowFactsTest, NoIgnoreRuleWhereTheNaNIsNotTheOpsOwnOrIsARealOverflow) {
  EXPECT_NE(op_stop("Torch.log.0.forward").intended_line(), "");
  OverflowFacts input = op_stop("Torch.log.0.forward");
  input.origin = Origin::Input;
  EXPECT_EQ(input.intended_line(), "");
  OverflowFacts high = op_stop("Torch.log.0.forward");
  high.finding.scene = Scene::InputAnomalyOutputAnomaly;
  EXPECT_EQ(high.intended_line(), "");
  OverflowFacts model = op_stop("Torch.log.0.forward");
  model.started_model = true;
  EXPECT_EQ(model.intended_line(), "");
  OverflowFacts no_output = op_stop("Torch.log.0.forward");
  no_output.finding.output_indices.clear();
  EXPECT_EQ(no_output.intended_line(), "");
  OverflowFacts outgrew = op_stop("Torch.exp.0.forward");
  ReplayFacts wider;
  wider.kind = "wider";
  wider.finite = true;
  outgrew.replay.verdicts = {wider};
  EXPECT_EQ(outgrew.intended_line(), "");
  outgrew.replay.verdicts[0].finite = false;  // not finite wider either: maybe intended
  EXPECT_NE(outgrew.intended_line(), "");
}

TEST(OverflowFactsTest, AbsorbedLinesSayWhatWasAbsorbedAndWhere) {
  OverflowFacts f;
  f.finding.call = "Torch.nan_to_num.0.forward";
  f.step = 2;
  f.origin = Origin::Input;
  f.source = "train.py:9: y = x.nan_to_num()";
  f.tensors = {tensor("input_args[0]", 3, 0, 0), tensor("input_args[1]", 0, 0, 1)};
  EXPECT_EQ(f.absorbed_line(),
            "msprobe_cpp: step 2: NaN/-inf in an input was absorbed by Torch.nan_to_num.0.forward "
            "(train.py:9: y = x.nan_to_num()); no stop (said once per call site)");
  f.origin = Origin::Parameter;
  f.parameter = "fc.bias";
  f.source.reset();
  f.tensors.clear();
  EXPECT_EQ(f.absorbed_line(),
            "msprobe_cpp: step 2: NaN/inf in parameter fc.bias was absorbed by "
            "Torch.nan_to_num.0.forward; no stop (said once per call site)");
}

TEST(OverflowFactsTest, HeldLinesSayWhoMadeItAndHowTheStepEnded) {
  OverflowFacts f;
  f.finding.call = "Torch.exp.0.forward";
  f.step = 5;
  f.held = true;
  f.origin = Origin::Op;
  f.note = "still held at the step's end";
  f.tensors = {tensor("output[0]", 0, 2, 0)};
  EXPECT_EQ(f.absorbed_line(),
            "msprobe_cpp: step 5: +inf made by Torch.exp.0.forward stayed in tensors that need no "
            "gradient and did no damage by the end of the step: still held at the step's end; no "
            "stop (said once per call site)");
  f.origin = Origin::Input;
  EXPECT_NE(f.absorbed_line().find(": +inf that came in with an input of Torch.exp.0.forward "
                                   "stayed"),
            std::string::npos);
}

TEST(OverflowFactsTest, PeerStops) {
  PeerOverflow peer{3, 7, "Distributed.all_reduce.0.forward", "", "NumericalMutationScene",
                    "medium"};
  EXPECT_EQ(peer_stop_line(peer, 0),
            "[rank 0] stopping: rank 3 overflowed at step 7 (Distributed.all_reduce.0.forward, "
            "origin None)");
  const OverflowFacts f = peer_stop_facts(peer, 7, 0, "", {});
  EXPECT_EQ(f.finding.call, "Distributed.all_reduce.0.forward");
  EXPECT_EQ(f.finding.scene, Scene::NumericalMutation);
  EXPECT_EQ(f.finding.severity, Severity::Medium);
  EXPECT_EQ(f.origin, Origin::Peer);
  EXPECT_EQ(f.peer.rank, 3);
  // No dump here and no call of its own: the message is the peer line alone.
  EXPECT_EQ(f.message(), peer_stop_line(peer, 0));
}

TEST(OverflowFactsTest, APeerStopWithUnknownSceneAndLevelHasNoneOfThem) {
  const OverflowFacts f = peer_stop_facts(PeerOverflow{1, 2, "Torch.mm.0.forward", "op", "", ""},
                                          2, 0, "/d", {});
  size_t seen = 0;
  for (const FactField& field : fields_of(f)) {
    const std::string attr = field.attr ? field.attr : "";
    if (attr == "scene" || attr == "level") {
      EXPECT_EQ(field.value.kind, FactValue::Kind::Null) << attr;
      ++seen;
    }
    if (attr == "call") {
      EXPECT_EQ(field.value.text, "Torch.mm.0.forward");
      ++seen;
    }
  }
  EXPECT_EQ(seen, 3u);
}

TEST(OverflowFactsTest, AnomalousArgsAreTheFindingsOwnInRecordOrder) {
  const CallRecord rec = record(fwd("Torch.add.0.forward", nan_t() + ", [" + clean() + ", " +
                                                               inf_t() + "], " + clean(),
                                    nan_t(), "\"alpha\": " + F("-Infinity")));
  Finding finding;
  finding.input_indices = {0, 1};
  finding.kwarg_keys = {"alpha"};
  finding.output_indices = {0};
  EXPECT_EQ(texts(anomalous_args(rec, finding, false)),
            (std::vector<std::string>{"input_args[0]: torch.float32 [2, 2]",
                                      "input_args[1][1]: torch.float32 [2, 2]",
                                      "alpha: float -Infinity",
                                      "output[0]: torch.float32 [2, 2]"}));
  finding.input_indices = {2};  // listed, but clean: told all the same
  finding.kwarg_keys.clear();
  finding.output_indices.clear();
  EXPECT_EQ(texts(anomalous_args(rec, finding, false)),
            std::vector<std::string>{"input_args[2]: torch.float32 [2, 2]"});
  EXPECT_TRUE(anomalous_args(rec, Finding{}, false).empty());
}

TEST(OverflowFactsTest, TheReportObjectHoldsTheFacts) {
  OverflowFacts f = op_stop("Torch.log.0.forward");
  f.step = 4;
  f.tensors = {tensor("output[0]", 1, 0, 0)};
  JsonWriter w(1);
  f.write(w);
  const nlohmann::json j = nlohmann::json::parse(w.str());
  EXPECT_EQ(j["api_name"], "Torch.log.0.forward");
  EXPECT_EQ(j["rank"], "critical");  // msprobe's key for the level
  EXPECT_EQ(j["origin"], "op");
  EXPECT_EQ(j["step"], 4);
  EXPECT_EQ(j["tensors"][0]["nan"], 1);
  EXPECT_EQ(j["tensors"][0]["shape"], nlohmann::json::parse("[8, 4]"));
  EXPECT_FALSE(j.contains("held"));
  EXPECT_TRUE(j["parameter"].is_null());
}

}  // namespace
}  // namespace msprobe
