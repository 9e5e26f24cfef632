// grad-compare: msprobe's GradComparator's similarities from two runs' direction files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/grad_compare.h"
#include "core/grad_summary.h"
#include "core/npy_file.h"
#include "core/python_text.h"
#include "test_util.h"

using namespace msprobe;
using msprobe::testing::error_of;
using msprobe::testing::read_text;
using msprobe::testing::TempDir;
namespace fs = std::filesystem;

namespace {

void put(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

// A grad_probe run's rank0: the summary CSV naming "b" before "a", and each step's directions.
void make_run(const fs::path& root, const std::vector<std::string>& a_steps,
              const std::vector<std::string>& b_steps) {
  GradProbeSection s;
  GradFacts b, a;
  b.name = "b";
  a.name = "a";
  put(root / "rank0" / "grad_summary_0.csv", grad_summary_csv(s, {b, a}));
  for (size_t step = 0; step < a_steps.size(); ++step) {
    const fs::path dir = root / "rank0" / ("step" + std::to_string(step));
    put(dir / "a.npy", npy_bool_bytes({int64_t(a_steps[step].size())}, a_steps[step]));
    put(dir / "b.npy", npy_bool_bytes({int64_t(b_steps[step].size())}, b_steps[step]));
  }
}

std::string bits(const std::string& ones) {  // "1010" -> 0/1 bytes
  std::string out;
  for (char c : ones) out += c == '1' ? '\1' : '\0';
  return out;
}

}  // namespace

TEST(GradCompare, SimilaritiesAsMsprobe) {
  TempDir dir;
  make_run(dir.path() / "r1", {bits("1100"), bits("1111")}, {bits("10"), bits("01")});
  make_run(dir.path() / "r2", {bits("1000"), bits("0000")}, {bits("10"), bits("10")});
  const auto ranks = compare_runs((dir.path() / "r1").string(), (dir.path() / "r2").string(),
                                  (dir.path() / "out").string());
  ASSERT_EQ(ranks.size(), 1u);
  const RankSimilarities& r = ranks[0];
  EXPECT_EQ(r.steps, (std::vector<int64_t>{0, 1}));
  ASSERT_EQ(r.rows.size(), 3u);
  EXPECT_EQ(r.rows[0].name, "b");  // the summary CSV's order
  EXPECT_EQ(r.rows[0].values, (std::vector<double>{1.0, 0.0}));
  EXPECT_EQ(r.rows[1].values, (std::vector<double>{0.75, 0.0}));
  EXPECT_EQ(r.rows[2].name, "summary");
  EXPECT_EQ(r.rows[2].values, (std::vector<double>{5.0 / 6, 0.0}));
  EXPECT_EQ(r.first_below(0.9), std::optional<size_t>(0));
  EXPECT_EQ(r.first_below(0.5), std::optional<size_t>(1));
  EXPECT_EQ(read_text(dir.path() / "out" / "rank0" / "similarities.csv"),
            std::string(kUtf8Bom) +
                "step,0,1\r\nb,1.0,0.0\r\na,0.75,0.0\r\nsummary,0.8333333333333334,0.0\r\n");
  for (const char* name : {"a", "b", "summary"}) {
    const std::string svg = read_text(dir.path() / "out" / "rank0" / "similarities_picture" /
                                      (std::string(name) + "_similarities.svg"));
    EXPECT_NE(svg.find("<polyline"), std::string::npos) << name;
    EXPECT_NE(svg.find(std::string(name) + "_similarities</text>"), std::string::npos) << name;
  }
}

TEST(GradCompare, NothingComparedIsMsprobesIntZero) {
  SimilarityRow row;
  row.add(0, 0);
  row.add(3, 4);
  EXPECT_EQ(row.texts, (std::vector<std::string>{"0", "0.75"}));
}

TEST(GradCompare, TellsWhatCannotBeCompared) {
  TempDir dir;
  make_run(dir.path() / "r1", {bits("11")}, {bits("1")});
  make_run(dir.path() / "r2", {bits("110")}, {bits("1")});
  const std::string out = (dir.path() / "out").string();
  EXPECT_NE(error_of<GradCompareError>([&] {
              compare_runs((dir.path() / "r1").string(), (dir.path() / "r2").string(), out);
            }).find("tensor shapes differ"),
            std::string::npos);
  fs::create_directories(dir.path() / "empty");
  EXPECT_NE(error_of<GradCompareError>([&] {
              compare_runs((dir.path() / "r1").string(), (dir.path() / "empty").string(), out);
            }).find("no rank<N> folder in both"),
            std::string::npos);
  fs::remove(dir.path() / "r2" / "rank0" / "step0" / "a.npy");
  EXPECT_NE(error_of<GradCompareError>([&] {
              compare_runs((dir.path() / "r1").string(), (dir.path() / "r2").string(), out);
            }).find("is missing"),
            std::string::npos);
}
