#include <gtest/gtest.h>

#include <cstdio>

#include "core/rules.h"
#include "test_util.h"

using namespace msprobe;
using msprobe::testing::error_of;

namespace {

std::string rules_error(const std::string& yaml) {
  return error_of<RulesError>([&] {
    RuleSet set;
    set.add_yaml(yaml, "my_rules.yaml");
  });
}

}  // namespace

TEST(Rules, ShippedRulesAreTheSeedsTen) {
  RuleSet set = RuleSet::shipped();
  EXPECT_EQ(set.size(), 10u);
  for (const char* name :
       {"torch.empty", "torch.empty_like", "torch.empty_strided", "distributed.recv",
        "distributed.all_gather", "distributed.reduce_scatter", "distributed._reduce_scatter_base",
        "distributed.all_gather_into_tensor", "distributed.reduce_scatter_tensor",
        "tensor.masked_fill_"}) {
    EXPECT_NE(set.find(name), nullptr) << name;
  }
  const IgnoreRule* recv = set.find("distributed.recv");
  ASSERT_NE(recv, nullptr);
  EXPECT_EQ(recv->input_indices, std::set<int64_t>{0});
  EXPECT_EQ(recv->input_names, std::set<std::string>{"tensor"});
  EXPECT_TRUE(recv->output_indices.empty());
}

TEST(Rules, EmptyDocumentsHoldNoRules) {
  RuleSet set;
  set.add_yaml("", "a.yaml");
  set.add_yaml("ignore_nan_inf:\n", "b.yaml");
  set.add_yaml("ignore_nan_inf: []\n", "c.yaml");
  EXPECT_EQ(set.size(), 0u);
}

TEST(Rules, MalformedFilesNameFileLineAndColumn) {
  EXPECT_EQ(rules_error("ignore_nan_inf:\n  - api_name: [unclosed\n"),
            "my_rules.yaml:3:1: invalid YAML: end of sequence flow not found");
  EXPECT_EQ(
      rules_error("- a\n- b\n"),
      "my_rules.yaml:1:1: (top level): expected a mapping with key ignore_nan_inf, got a list");
  EXPECT_EQ(rules_error("ignore_nan_inf: 3\n"),
            "my_rules.yaml:1:17: ignore_nan_inf: expected a list of rules, got \"3\"");
  EXPECT_EQ(
      rules_error("ignore_nan_infs: []\n"),
      "my_rules.yaml:1:1: (top level): unknown key \"ignore_nan_infs\"; allowed: ignore_nan_inf");
  EXPECT_EQ(
      rules_error("ignore_nan_inf:\n  - api_name: torch.a\n    output_ignore:\n      - index: x\n"),
      "my_rules.yaml:4:16: ignore_nan_inf[0].output_ignore[0].index: expected an integer >= 0, got "
      "\"x\"");
  EXPECT_EQ(rules_error(
                "ignore_nan_inf:\n  - api_name: torch.a\n    output_ignore:\n      - index: -1\n"),
            "my_rules.yaml:4:16: ignore_nan_inf[0].output_ignore[0].index: expected an integer >= "
            "0, got \"-1\"");
  EXPECT_EQ(rules_error(
                "ignore_nan_inf:\n  - api_name: torch.a\n    output_ignore:\n      - name: out\n"),
            "my_rules.yaml:4:9: ignore_nan_inf[0].output_ignore[0]: unknown key \"name\"; allowed: "
            "index");
  EXPECT_EQ(rules_error("ignore_nan_inf:\n  - api_name: torch.a\n    input_ignore: {index: 0}\n"),
            "my_rules.yaml:3:19: ignore_nan_inf[0].input_ignore: expected a list, got a mapping");
  EXPECT_EQ(rules_error("ignore_nan_inf:\n  - api_nme: torch.a\n"),
            "my_rules.yaml:2:5: ignore_nan_inf[0]: unknown key \"api_nme\"; allowed: api_name, "
            "description, "
            "input_ignore, output_ignore");
  EXPECT_EQ(rules_error("ignore_nan_inf:\n  - torch.a\n"),
            "my_rules.yaml:2:5: ignore_nan_inf[0]: expected a mapping, got \"torch.a\"");
  EXPECT_EQ(rules_error("ignore_nan_inf:\n  - api_name: [a, b]\n    output_ignore: [{index: 0}]\n"),
            "my_rules.yaml:2:15: ignore_nan_inf[0].api_name: expected a string, got a list");
}

TEST(Rules, AddFileAndMissingFile) {
  const msprobe::testing::TempDir dir;
  const std::string path = dir.write(
      "extra_rules.yaml",
      "ignore_nan_inf:\n  - api_name: torch.sqrt\n    output_ignore:\n      - index: 0\n");
  RuleSet set;
  set.add_file(path);
  EXPECT_NE(set.find("torch.sqrt"), nullptr);
  std::remove(path.c_str());
  EXPECT_EQ(error_of<RulesError>([&] { set.add_file(path); }),
            path + ": cannot read: No such file or directory (rules file)");
}

TEST(Rules, AliasesAreResolved) {
  RuleSet set;
  set.add_yaml(R"(ignore_nan_inf:
  - api_name: torch.a
    input_ignore: &first [{index: 0}, {name: tensor}]
  - api_name: torch.b
    input_ignore: *first
)",
               "x.yaml");
  ASSERT_NE(set.find("torch.b"), nullptr);
  EXPECT_EQ(set.find("torch.b")->input_indices, std::set<int64_t>{0});
  EXPECT_EQ(set.find("torch.b")->input_names, std::set<std::string>{"tensor"});
}

TEST(Rules, AliasBombIsRefusedNotExpanded) {
  // Nine levels of ten aliases each ask for a billion nodes, all within one rule.
  std::string yaml = "ignore_nan_inf:\n  - api_name: torch.a\n    description:\n";
  yaml += "      - &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int level = 1; level <= 9; ++level) {
    yaml += "      - &l" + std::to_string(level) + " [";
    for (int k = 0; k < 10; ++k) {
      yaml += std::string(k ? ", " : "") + "*l" + std::to_string(level - 1);
    }
    yaml += "]\n";
  }
  EXPECT_NE(rules_error(yaml).find("aliases expand to more than a million nodes"),
            std::string::npos)
      << rules_error(yaml);
}

TEST(Rules, AnInvalidFileAddsNoRules) {
  RuleSet set;
  EXPECT_THROW(set.add_yaml(R"(ignore_nan_inf:
  - api_name: torch.good
    output_ignore: [{index: 0}]
  - api_name: torch.bad
    output_ignore: [{index: -1}]
)",
                            "x.yaml"),
               RulesError);
  EXPECT_EQ(set.size(), 0u);
}

TEST(Rules, FirstRuleOfANameWinsWithinAndAcrossFiles) {
  RuleSet set;
  set.add_yaml(
      "ignore_nan_inf:\n  - {api_name: torch.a, output_ignore: [{index: 0}]}\n"
      "  - {api_name: torch.a, output_ignore: [{index: 1}]}\n",
      "one.yaml");
  set.add_yaml("ignore_nan_inf:\n  - {api_name: torch.a, output_ignore: [{index: 2}]}\n",
               "two.yaml");
  ASSERT_NE(set.find("torch.a"), nullptr);
  EXPECT_EQ(set.find("torch.a")->output_indices, std::set<int64_t>{0});
}

TEST(Rules, TwentyThousandRulesThenAnError) {
  std::string yaml = "ignore_nan_inf:\n";
  for (int i = 0; i < 20000; ++i) {
    yaml += "  - api_name: \"torch.op" + std::to_string(i) +
            "\"\n    input_ignore:\n      - index: 0\n    output_ignore:\n      - index: 0\n";
  }
  RuleSet set;
  set.add_yaml(yaml, "many.yaml");
  EXPECT_EQ(set.size(), 20000u);
  EXPECT_EQ(rules_error(yaml + "  - api_name: torch.last\n    output_ignore: [{index: x}]\n"),
            "my_rules.yaml:100003:29: ignore_nan_inf[20000].output_ignore[0].index: expected an "
            "integer >= 0, got \"x\"");
}
