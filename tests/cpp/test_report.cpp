#include "core/report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace msprobe {
namespace {

Finding finding(const std::string& call, Severity severity,
                Scene scene = Scene::InputNormalOutputAnomaly) {
  Finding f;
  f.call = call;
  f.severity = severity;
  f.scene = scene;
  f.output_indices = {0};
  return f;
}

TEST(ReportTest, SeveritySummaryCountsEachLevel) {
  EXPECT_EQ(severity_summary(SeverityCounts{}), "0 anomalous calls (0 critical, 0 high, 0 medium)");
  SeverityCounts one;
  one.add(Severity::Medium);
  EXPECT_EQ(severity_summary(one), "1 anomalous call (0 critical, 0 high, 1 medium)");
  SeverityCounts many;
  many.add(Severity::Critical);
  many.add(Severity::Critical);
  many.add(Severity::High);
  EXPECT_EQ(severity_summary(many), "3 anomalous calls (2 critical, 1 high, 0 medium)");
}

TEST(ReportTest, CallsAreListedUnderTheirLevelInRecordOrder) {
  Report r;
  EXPECT_TRUE(r.empty());
  r.findings.add(finding("Torch.b.0.forward", Severity::High));
  r.findings.add(finding("Torch.a.0.forward", Severity::Critical));
  r.findings.add(finding("Torch.c.0.forward", Severity::High));
  EXPECT_FALSE(r.empty());
  const nlohmann::json j = nlohmann::json::parse(r.to_json());
  EXPECT_EQ(j["critical_apis"], nlohmann::json::parse(R"(["Torch.a.0.forward"])"));
  EXPECT_EQ(j["high_priority_apis"],
            nlohmann::json::parse(R"(["Torch.b.0.forward", "Torch.c.0.forward"])"));
  EXPECT_TRUE(j["medium_priority_apis"].empty());
  EXPECT_EQ(j["anomaly_details"].size(), 3u);
  EXPECT_EQ(j["anomaly_details"][2]["api_name"], "Torch.c.0.forward");
}

TEST(ReportTest, PeerStopAndLiveStopFollowTheDetails) {
  Report r;
  r.peer_stop = PeerOverflow{1, 8, "Functional.linear.0.forward", "", "", ""};
  r.live_stop = R"({"api_name": "Torch.exp.0.forward"})";
  EXPECT_EQ(r.to_json(1),
            "{\n \"critical_apis\": [],\n \"high_priority_apis\": [],\n"
            " \"medium_priority_apis\": [],\n \"anomaly_details\": [],\n"
            " \"peer_stop\": {\n  \"rank\": 1,\n  \"step\": 8,\n"
            "  \"call\": \"Functional.linear.0.forward\",\n  \"origin\": null,\n"
            "  \"scene\": null,\n  \"level\": null\n },\n"
            " \"live_stop\": {\"api_name\": \"Torch.exp.0.forward\"}\n}");
  r.peer_stop->origin = "input";
  EXPECT_EQ(nlohmann::json::parse(r.to_json())["peer_stop"]["origin"], "input");
}

TEST(ReportTest, ASinkGetsTheWholeDocumentInChunks) {
  for (bool spilled : {false, true}) {
    Report r;
    if (spilled) r.findings = Findings::spilled();
    for (int i = 0; i < 2000; ++i) {
      r.findings.add(finding("Torch.op" + std::to_string(i) + ".0.forward",
                             i % 3 ? Severity::High : Severity::Critical));
    }
    OverflowFacts first;
    first.finding = finding("Torch.op0.0.forward", Severity::Critical);
    r.first_anomaly = first;
    const std::string whole = r.to_json(1);
    ASSERT_GT(whole.size(), size_t{2} << 16);
    std::string streamed;
    size_t chunks = 0;
    JsonWriter w(1);
    r.write(w, [&](const std::string& chunk) {
      streamed += chunk;
      ++chunks;
    });
    EXPECT_EQ(streamed, whole) << "spilled " << spilled;
    EXPECT_GE(chunks, 3u);
    EXPECT_EQ(w.str(), "");  // everything was handed over
  }
}

TEST(ReportTest, StepSummaryTellsTheFirstAnomalyAndEachJudgement) {
  Report r;
  std::vector<Judgement> j;
  const auto add = [&](const std::string& call, Severity s, Judgement how) {
    r.findings.add(finding(call, s));
    j.push_back(how);
  };
  add("Torch.log.0.forward", Severity::Critical, Judgement::Flagged);
  add("Torch.mul.0.forward", Severity::High, Judgement::Flagged);
  add("Torch.where.0.forward", Severity::Medium, Judgement::Explained);
  add("Torch.bmm.0.forward", Severity::High, Judgement::Lead);
  for (int i = 1; i <= 4; ++i) {
    add("Torch.abs" + std::to_string(i) + ".0.forward", Severity::Critical, Judgement::Absorbed);
  }
  add("Torch.held.0.forward", Severity::Critical, Judgement::HeldToEnd);
  OverflowFacts first;
  first.finding = finding("Torch.log.0.forward", Severity::Critical);
  first.origin = Origin::Op;
  first.note = "a note";
  first.source = "train.py:3: y = x.log()";
  ArgFacts out;
  out.position = "output[0]";
  out.type = "torch.Tensor";
  out.dtype = "torch.float16";
  out.shape = {8, 4};
  first.tensors = {out};
  r.first_anomaly = first;
  EXPECT_EQ(
      step_summary(r, j, 3, 0, "/d/step3/rank0"),
      "[rank 0] msprobe_cpp: step 3 flagged: 9 anomalous calls (6 critical, 2 high, 1 medium) on "
      "this rank\n"
      "[rank 0]   first anomaly: Torch.log.0.forward (critical, InputNormalOutputAnomalyScene, "
      "origin op)\n"
      "[rank 0]     a note\n"
      "[rank 0]     source: train.py:3: y = x.log()\n"
      "[rank 0]     output[0]: torch.float16 [8, 4]\n"
      "[rank 0]   critical: Torch.log.0.forward\n"
      "[rank 0]   high: Torch.mul.0.forward\n"
      "[rank 0]   leads (finite values that jumped by more than the mutation threshold): "
      "Torch.bmm.0.forward\n"
      "[rank 0]   absorbed (NaN/inf turned finite or let go before it did damage, no stop): "
      "Torch.abs1.0.forward, Torch.abs2.0.forward, Torch.abs3.0.forward (and 1 more)\n"
      "[rank 0]   held to the end of the step (in tensors that need no gradient, no damage, no "
      "stop): Torch.held.0.forward\n"
      "[rank 0]   expected (from -inf masks and other deliberate constants): "
      "Torch.where.0.forward\n"
      "[rank 0]   dump: /d/step3/rank0\n");
}

TEST(ReportTest, StepSummaryOfAPeerStopWithoutRanks) {
  Report r;
  r.peer_stop = PeerOverflow{1, 2, "Torch.mm.0.forward", "op", "", ""};
  EXPECT_EQ(step_summary(r, {}, 2, -1, "/d"),
            "msprobe_cpp: step 2 written for a peer stop (rank 1 overflowed): 0 anomalous calls "
            "(0 critical, 0 high, 0 medium)\n"
            "  dump: /d\n");
}

TEST(ReportTest, StepSummaryOfAnAnomalyNoCallRecordHolds) {
  // A stop after an optimizer step (its parameters looked at once after it): the step's records
  // are clean, and the summary does not say "0 anomalous calls" above a critical first anomaly.
  Report r;
  OverflowFacts first;
  first.finding = finding("(after Adam.step)", Severity::Critical);
  r.first_anomaly = first;
  const std::string text = step_summary(r, {}, 4, -1, "/d");
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "msprobe_cpp: step 4 flagged: no anomalous call record; the first anomaly is outside "
            "the calls");
  EXPECT_NE(text.find("  first anomaly: (after Adam.step) (critical"), std::string::npos) << text;
}

TEST(ReportTest, StepSummarySaysWhenTheFirstAnomalyStoppedNothing) {
  Report r;
  r.findings.add(finding("Torch.exp.0.forward", Severity::Critical));
  OverflowFacts first;
  first.finding = finding("Torch.exp.0.forward", Severity::Critical);
  first.absorbed = true;
  r.first_anomaly = first;
  const auto first_line = [&] {
    const std::string text = step_summary(r, {}, 1, -1, "/d");
    const size_t start = text.find('\n') + 1;
    return text.substr(start, text.find('\n', start) - start);
  };
  EXPECT_EQ(first_line(),
            "  first anomaly: Torch.exp.0.forward (critical, InputNormalOutputAnomalyScene, "
            "absorbed: no stop)");
  r.first_anomaly->absorbed = false;
  r.first_anomaly->held = true;
  EXPECT_EQ(first_line(), "  first anomaly: Torch.exp.0.forward (critical, "
                          "InputNormalOutputAnomalyScene, did no damage: no stop)");
  r.first_anomaly->caught.call = "Functional.linear.0.forward";
  EXPECT_EQ(first_line(),
            "  first anomaly: Torch.exp.0.forward (critical, InputNormalOutputAnomalyScene)");
  // Without judgements, no call is listed as flagged.
  EXPECT_EQ(step_summary(r, {}, 1, -1, "/d").find("  critical: "), std::string::npos);
}

}  // namespace
}  // namespace msprobe
