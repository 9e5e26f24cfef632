#include "core/streamed_report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/report.h"

namespace msprobe {
namespace {

std::vector<Finding> findings(size_t n) {
  std::vector<Finding> out;
  const Severity levels[] = {Severity::High, Severity::Critical, Severity::Medium, Severity::High};
  for (size_t i = 0; i < n; ++i) {
    Finding f;
    f.call = "Torch.op_" + std::to_string(i % 7) + "." + std::to_string(i) + ".forward";
    f.severity = levels[i % 4];
    f.scene = i % 3 ? Scene::InputNormalOutputAnomaly : Scene::InputAnomalyOutputAnomaly;
    f.input_indices = {i % 2};
    f.output_indices = {0, i % 5};
    if (i % 5 == 0) f.kwarg_keys = {"weight"};
    f.input_norm = 1.5 * static_cast<double>(i);
    f.output_norm = i % 2 ? 1.0 / 0.0 : 2.25;
    out.push_back(f);
  }
  return out;
}

// The document Report::write makes of `found`, and the one StreamedReport makes, with `files`
// reports as members of one object (0: a single report, the document itself).
std::pair<std::string, std::string> both(const std::vector<Finding>& found, size_t files,
                                         const std::optional<std::string>& live_stop) {
  std::string whole, streamed;
  JsonWriter a(1), b(1);
  if (files) {
    a.begin_object();
    b.begin_object();
  }
  for (size_t file = 0; file < std::max<size_t>(files, 1); ++file) {
    Report report;
    report.live_stop = live_stop;
    StreamedReport stream(1, files ? 1 : 0);
    for (const Finding& f : found) {
      report.findings.add(f);
      stream.add(f);
    }
    EXPECT_EQ(stream.counts().by_level, report.findings.counts().by_level);
    if (files) {
      a.key("step" + std::to_string(file) + "/dump.json");
      b.key("step" + std::to_string(file) + "/dump.json");
    }
    report.write(a, [&](const std::string& t) { whole += t; });
    stream.write(b, [&](const std::string& t) { streamed += t; }, live_stop);
  }
  if (files) {
    a.end_object();
    b.end_object();
  }
  return {whole + a.take(), streamed + b.take()};
}

TEST(StreamedReportTest, WritesWhatReportWritesForEveryCountAndDepth) {
  // 3000 findings pass the 64 KiB the text is held to before it is spilled, in each list too.
  for (size_t n : {0, 1, 2, 5, 3000}) {
    for (size_t files : {0, 1, 3}) {
      for (const std::optional<std::string>& live : {std::optional<std::string>{},
                                                     std::optional<std::string>{R"({"a": 1})"}}) {
        const auto [whole, streamed] = both(findings(n), files, live);
        ASSERT_EQ(streamed, whole) << n << " findings, " << files << " files";
        EXPECT_TRUE(nlohmann::json::accept(streamed));
      }
    }
  }
}

TEST(StreamedReportTest, ListsEachCallUnderItsLevelInRecordOrder) {
  const auto [whole, streamed] = both(findings(9), 0, std::nullopt);
  const nlohmann::json j = nlohmann::json::parse(streamed);
  EXPECT_EQ(j["critical_apis"], nlohmann::json::parse(
                                    R"(["Torch.op_1.1.forward", "Torch.op_5.5.forward"])"));
  EXPECT_EQ(j["medium_priority_apis"],
            nlohmann::json::parse(R"(["Torch.op_2.2.forward", "Torch.op_6.6.forward"])"));
  EXPECT_EQ(j["high_priority_apis"].size(), 5u);
  EXPECT_EQ(j["anomaly_details"].size(), 9u);
  EXPECT_EQ(j["anomaly_details"][8]["api_name"], "Torch.op_1.8.forward");
}

}  // namespace
}  // namespace msprobe
