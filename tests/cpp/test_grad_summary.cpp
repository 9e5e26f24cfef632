// grad_probe's summary CSV (msprobe 1.1.1's grad_stat_csv.py) and its config section.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/grad_summary.h"
#include "core/python_text.h"
#include "test_util.h"

using namespace msprobe;
using msprobe::testing::error_of;
using nlohmann::json;

namespace {

GradFacts weight_facts() {
  GradFacts f;
  f.name = "fc.weight";
  f.md5 = "0123456789abcdef0123456789abcdef";
  f.max = static_cast<double>(0.1f);
  f.min = -2.5;
  f.norm = 3.0;
  f.shape = {2, 3};
  f.intervals = {1, 2, 0, 3};
  f.zeros = 2;
  f.numel = 6;
  return f;
}

Config grad_config(const json& section) {
  return parse_config(json{{"task", "grad_probe"}, {"dump_path", "out"}, {"grad_probe", section}},
                      "config.json");
}

std::string grad_error(const json& section) {
  return error_of<ConfigError>([&] { grad_config(section); });
}

}  // namespace

TEST(GradSummary, EachLevelsColumns) {
  GradProbeSection s;
  s.level = GradLevel::L0;
  EXPECT_EQ(grad_summary_header(s),
            (std::vector<std::string>{"param_name", "MD5", "max", "min", "norm", "shape"}));
  EXPECT_EQ(grad_summary_row(s, weight_facts()),
            (std::vector<std::string>{"fc.weight", "0123456789abcdef0123456789abcdef",
                                      "0.10000000149011612", "-2.5", "3.0", "[2, 3]"}));
  s.level = GradLevel::L1;
  EXPECT_EQ(grad_summary_header(s),
            (std::vector<std::string>{"param_name", "max", "min", "norm", "shape"}));
  s.level = GradLevel::L2;
  EXPECT_EQ(grad_summary_header(s),
            (std::vector<std::string>{"param_name", "(-inf, -1]", "(-1, 0]", "(0, 1]", "(1, inf)",
                                      "=0", "max", "min", "norm", "shape"}));
  EXPECT_EQ(grad_summary_row(s, weight_facts()),
            (std::vector<std::string>{"fc.weight", "0.16666666666666666", "0.3333333333333333",
                                      "0.0", "0.5", "0.3333333333333333", "0.10000000149011612",
                                      "-2.5", "3.0", "[2, 3]"}));
  EXPECT_FALSE(writes_direction(GradLevel::L0));
  EXPECT_TRUE(writes_direction(GradLevel::L1));
  EXPECT_TRUE(writes_direction(GradLevel::L2));
}

TEST(GradSummary, EmptyGradientAndNoBounds) {
  GradProbeSection s;
  s.level = GradLevel::L2;
  s.bounds.clear();
  GradFacts f = weight_facts();
  f.numel = 0;
  f.intervals = {0};
  f.zeros = 0;
  // msprobe's header then has "=0" alone, and the row one interval more: kept as msprobe has it.
  EXPECT_EQ(grad_summary_header(s)[1], "=0");
  const auto row = grad_summary_row(s, f);
  EXPECT_EQ(row[1], "0");
  EXPECT_EQ(row[2], "0");
  EXPECT_EQ(row[3], "0.10000000149011612");
}

TEST(GradSummary, WholeFileHasBomAndCrLf) {
  GradProbeSection s;
  const std::string csv = grad_summary_csv(s, {weight_facts()});
  EXPECT_EQ(csv, std::string(kUtf8Bom) +
                     "param_name,max,min,norm,shape\r\n"
                     "fc.weight,0.10000000149011612,-2.5,3.0,\"[2, 3]\"\r\n");
}

TEST(GradProbeConfig, DefaultsAsMsprobe) {
  const Config c = parse_config(json{{"task", "grad_probe"}, {"dump_path", "out"}}, "config.json");
  EXPECT_EQ(c.task, Task::GradProbe);
  EXPECT_FALSE(c.dumps_calls());
  EXPECT_EQ(c.grad_probe.level, GradLevel::L1);
  EXPECT_TRUE(c.grad_probe.param_list.empty());
  ASSERT_EQ(c.grad_probe.bounds.size(), 3u);
  EXPECT_EQ(c.grad_probe.bounds[0].text, "-1");
  EXPECT_TRUE(c.grad_probe.watches("anything"));
}

TEST(GradProbeConfig, ReadsEveryKey) {
  const Config c = grad_config(
      {{"grad_level", "L2"}, {"param_list", {"a.weight"}}, {"bounds", {-0.5, 0, 1e-5, 3}}});
  EXPECT_EQ(c.grad_probe.level, GradLevel::L2);
  EXPECT_TRUE(c.grad_probe.watches("a.weight"));
  EXPECT_FALSE(c.grad_probe.watches("b.weight"));
  std::vector<std::string> texts;
  for (const auto& b : c.grad_probe.bounds) texts.push_back(b.text);
  EXPECT_EQ(texts, (std::vector<std::string>{"-0.5", "0", "1e-05", "3"}));
  // msprobe's BaseConfig keys are accepted and ignored, and so is any top-level level.
  EXPECT_NO_THROW(grad_config({{"scope", json::array()}, {"list", json::array()}}));
  EXPECT_NO_THROW(parse_config(json{{"task", "grad_probe"}, {"dump_path", "out"}, {"level", "L2"}},
                               "config.json"));
}

TEST(GradProbeConfig, OneLinePerBadValue) {
  EXPECT_EQ(grad_error({{"grad_level", "L3"}}),
            "config.json: grad_probe.grad_level: expected one of L0, L1, L2, got \"L3\"");
  EXPECT_EQ(grad_error({{"param_list", "fc.weight"}}),
            "config.json: grad_probe.param_list: expected a list of non-empty strings, got "
            "\"fc.weight\"");
  EXPECT_EQ(grad_error({{"bounds", {0, 0}}}),
            "config.json: grad_probe.bounds[1]: expected a number above the one before it (bounds "
            "ascend), got 0");
  EXPECT_EQ(
      grad_error({{"bounds", {"1"}}}),
      "config.json: grad_probe.bounds[0]: expected a number from -2**63 to 2**63-1, got \"1\"");
  EXPECT_EQ(
      grad_error({{"bounds", {1e19}}}),
      "config.json: grad_probe.bounds[0]: expected a number from -2**63 to 2**63-1, got 1e+19");
  EXPECT_EQ(grad_error({{"bounds", 1}}),
            "config.json: grad_probe.bounds: expected a list of numbers in ascending order, got 1");
  EXPECT_NE(grad_error({{"grad_levle", "L0"}}).find("did you mean \"grad_level\""),
            std::string::npos);
}
