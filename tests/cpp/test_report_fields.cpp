// docs/formats.md describes every field overflow_report.json can hold: a report with every field
// set is written, and each of its keys must be named in that section of the docs (a table row
// for each key of first_anomaly). A field added to the code without its documentation fails here.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "core/fact_fields.h"
#include "core/report.h"

namespace msprobe {
namespace {

std::string formats_section() {
  std::ifstream in(std::string(MSPROBE_SOURCE_DIR) + "/docs/formats.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const size_t start = doc.find("\n## overflow_report.json");
  const size_t end = doc.find("\n## ", start + 1);
  return start == std::string::npos ? "" : doc.substr(start, end - start);
}

// Every facts field with a value, so that each optional member is written.
Report report_with_every_field() {
  Finding f;
  f.call = "Tensor.__mul__.3.forward";
  f.scene = Scene::NumericalMutation;  // writes the mutation's threshold fields too
  f.severity = Severity::High;
  f.input_indices = {0};
  f.kwarg_keys = {"other"};
  f.output_indices = {0};
  f.threshold = 1e5;
  f.input_norm = 1.0;
  f.output_norm = 1e6;

  OverflowFacts facts;
  facts.finding = f;
  facts.origin = Origin::Op;
  facts.parameter = "blocks.1.mlp.fc1.weight";
  facts.module = "Module.blocks.2.attn.CausalSelfAttention.forward.0";
  facts.source = "train.py:53: return (scores.half() * temperature).float()";
  ArgFacts tensor;
  tensor.position = "output[0]";
  tensor.type = "torch.Tensor";
  tensor.dtype = "torch.float16";
  tensor.shape = {8, 4};
  tensor.counted = true;
  tensor.posinf = 3;
  ArgFacts scalar;
  scalar.position = "input_args[1]";
  scalar.type = "float";
  scalar.value = -1.0;
  facts.tensors = {tensor, scalar};
  facts.gradients.parameters = {"fc.weight"};
  facts.note = "a note";
  facts.gradients.masked = true;
  facts.absorbed = true;
  facts.held = true;
  facts.caught.call = "Functional.linear.0.forward";
  facts.caught.how = "a parameter's gradient";
  facts.raised_calls_later = 2;
  facts.history = HeadroomTrend{"torch.float16", {{6, 0.5, 32752.0}, {7, 0.9, 58953.6}}, "grew"};
  facts.replay.tried = true;
  ReplayFacts replay;
  replay.kind = "wider";
  replay.dtype = "torch.float32";
  replay.device = "cpu";
  replay.finite = true;
  replay.max = 1.79e6;
  replay.min = -1.0;
  replay.verdict = "replay in float32: finite";
  facts.replay.verdicts = {replay};
  facts.replay.not_replayed = "not replayed: an in-place call";
  facts.step = 8;

  Report r;
  r.findings.add(f);
  r.first_anomaly = facts;
  r.peer_stop = PeerOverflow{1, 8, "Functional.linear.0.forward", "input", "", ""};
  r.monitor_alert = "Rule AnomalyTurbulence reports anomaly signal in ...";
  return r;
}

void collect_keys(const nlohmann::json& j, std::set<std::string>& keys) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      keys.insert(k);
      collect_keys(v, keys);
    }
  } else if (j.is_array()) {
    for (const auto& v : j) collect_keys(v, keys);
  }
}

bool named(const std::string& section, const std::string& key) {
  return section.find("`" + key + "`") != std::string::npos ||
         section.find("\"" + key + "\"") != std::string::npos;
}

TEST(ReportFields, EveryFieldWrittenIsDescribedInFormatsMd) {
  const std::string section = formats_section();
  ASSERT_FALSE(section.empty()) << "docs/formats.md has no overflow_report.json section";
  const nlohmann::json written = nlohmann::json::parse(report_with_every_field().to_json());
  std::set<std::string> keys;
  collect_keys(written, keys);
  for (const std::string& key : keys) EXPECT_TRUE(named(section, key)) << "undocumented: " << key;
  // Each of first_anomaly's own fields has its table row, besides the detail fields it shares
  // with anomaly_details (one row names those).
  ASSERT_TRUE(written.contains("first_anomaly"));
  const nlohmann::json& detail = written["anomaly_details"][0];
  for (const auto& [key, value] : written["first_anomaly"].items()) {
    if (detail.contains(key)) continue;
    EXPECT_NE(section.find("| `" + key + "` |"), std::string::npos) << "no table row: " << key;
  }
}

std::set<std::string> json_keys(const std::vector<FactField>& fields) {
  std::set<std::string> keys;
  for (const FactField& f : fields) {
    if (f.json && f.in_json) keys.insert(f.json);
  }
  return keys;
}

std::set<std::string> object_keys(const nlohmann::json& j) {
  std::set<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.insert(k);
  return keys;
}

// The three renderers read one list per fact type (core/fact_fields.h): the report's keys are
// the list's JSON keys, at every level; the message is the list's lines, in its order; and the
// Python attributes are its attribute names (tests/python/test_stop_fields.py).
TEST(ReportFields, TheReportWritesEachFactTypesFieldList) {
  const Report r = report_with_every_field();
  const nlohmann::json written = nlohmann::json::parse(r.to_json());
  const OverflowFacts& facts = *r.first_anomaly;
  ASSERT_TRUE(written.contains("first_anomaly"));
  const nlohmann::json& first = written["first_anomaly"];
  EXPECT_EQ(object_keys(first), json_keys(fields_of(facts)));
  ASSERT_EQ(first["tensors"].size(), facts.tensors.size());
  for (size_t i = 0; i < facts.tensors.size(); ++i) {
    EXPECT_EQ(object_keys(first["tensors"][i]), json_keys(fields_of(facts.tensors[i])));
  }
  ASSERT_EQ(first["replay"].size(), 1u);
  EXPECT_EQ(object_keys(first["replay"][0]), json_keys(fields_of(facts.replay.verdicts[0])));
  EXPECT_EQ(object_keys(written["anomaly_details"][0]), json_keys(fields_of(facts.finding)));
}

TEST(ReportFields, AnOptionalFieldLeavesTheReportWhenItHasNoValue) {
  OverflowFacts facts;
  facts.finding.call = "Functional.linear.0.forward";
  JsonWriter w(0);
  facts.write(w);
  const std::set<std::string> keys = object_keys(nlohmann::json::parse(w.str()));
  for (const char* optional : {"held", "caught", "raised_calls_later", "history", "replay",
                               "not_replayed", "threshold", "scale_change_detected"}) {
    EXPECT_EQ(keys.count(optional), 0u) << optional;
  }
  EXPECT_EQ(keys, json_keys(fields_of(facts)));
}

TEST(ReportFields, TheMessageIsTheFieldListsLinesInItsOrder) {
  const OverflowFacts facts = *report_with_every_field().first_anomaly;
  const std::string message = facts.message();
  size_t at = message.find('\n');
  ASSERT_NE(at, std::string::npos);
  size_t lines = 0;
  for (const FactField& f : fields_of(facts)) {
    if (f.line.empty()) continue;
    ++lines;
    const size_t found = message.find("\n  " + f.line, at);
    ASSERT_NE(found, std::string::npos) << "not in the message, or out of order: " << f.line;
    at = found + 3 + f.line.size();  // past "\n  " and the line
  }
  EXPECT_EQ(at, message.size());  // nothing after the last field's line
  EXPECT_GE(lines, 10u);
}

TEST(ReportFields, APeerStopIsBuiltFromTheSameList) {
  const PeerOverflow peer{
      1, 4, "Functional.linear.0.forward", "input", "InputAnomalyOutputAnomalyScene", "high"};
  const OverflowFacts facts = peer_stop_facts(peer, 4, 0, "/d/step4/rank0", {"fc.weight"});
  const std::string message = facts.message();
  EXPECT_EQ(message.rfind("[rank 0] stopping: rank 1 overflowed at step 4 "
                          "(Functional.linear.0.forward, origin input)",
                          0),
            0u)
      << message;
  EXPECT_EQ(message, peer_stop_line(peer, 0) + field_lines(fields_of(facts)));
  EXPECT_NE(message.find("\n  non-finite gradients: fc.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("\n  dump:   /d/step4/rank0"), std::string::npos) << message;
  bool peer_step = false, scene = false;
  for (const FactField& f : fields_of(facts)) {
    const std::string attr = f.attr ? f.attr : "";
    if (attr == "peer_step") peer_step = f.value.integer == 4;
    if (attr == "scene") scene = f.value.text == "InputAnomalyOutputAnomalyScene";
  }
  EXPECT_TRUE(peer_step);
  EXPECT_TRUE(scene);
}

}  // namespace
}  // namespace msprobe
