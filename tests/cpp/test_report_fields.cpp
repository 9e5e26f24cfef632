// docs/formats.md describes every field overflow_report.json can hold: a report with every field
// set is written, and each of its keys must be named in that section of the docs (a table row
// for each key of first_anomaly). A field added to the code without its documentation fails here.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

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
  r.peer_stop = PeerOverflow{1, 8, "Functional.linear.0.forward", "input"};
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

}  // namespace
}  // namespace msprobe
