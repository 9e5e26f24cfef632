#include "core/yaml_tree.h"

#include <gtest/gtest.h>
#include <yaml-cpp/exceptions.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace msprobe {
namespace {

using Kind = YamlNode::Kind;

const YamlItemSink kNoSink = [](YamlNode&&, size_t) { ADD_FAILURE() << "nothing is streamed"; };

YamlNode parse(const std::string& text) {
  return parse_yaml(text, "", kNoSink);
}

// The message of the ParserException that parsing `text` throws, with its 0-based line.
std::string parse_error(const std::string& text) {
  return msprobe::testing::error_of<YAML::ParserException>(
      [&] { parse(text); },
      [](const YAML::ParserException& e) {
        return std::to_string(e.mark.line) + ": " + e.msg;
      });
}

TEST(YamlTreeTest, MapsSequencesScalarsAndNulls) {
  const YamlNode root = parse("name: add\nlist: [1, two]\nnothing: ~\nempty:\n");
  ASSERT_EQ(root.kind, Kind::Map);
  ASSERT_EQ(root.items.size(), 8u);  // keys and values alternating
  EXPECT_EQ(root.items[0].scalar, "name");
  ASSERT_NE(root.find("name"), nullptr);
  EXPECT_EQ(root.find("name")->kind, Kind::Scalar);
  EXPECT_EQ(root.find("name")->scalar, "add");
  const YamlNode* list = root.find("list");
  ASSERT_NE(list, nullptr);
  ASSERT_EQ(list->kind, Kind::Sequence);
  ASSERT_EQ(list->items.size(), 2u);
  EXPECT_EQ(list->items[0].scalar, "1");
  EXPECT_EQ(list->items[1].scalar, "two");
  EXPECT_EQ(root.find("nothing")->kind, Kind::Null);
  EXPECT_EQ(root.find("empty")->kind, Kind::Null);
}

TEST(YamlTreeTest, QuotedTextStaysAScalar) {
  const YamlNode root = parse("a: \"~\"\nb: 'x: y'\n");
  EXPECT_EQ(root.find("a")->kind, Kind::Scalar);
  EXPECT_EQ(root.find("a")->scalar, "~");
  EXPECT_EQ(root.find("b")->scalar, "x: y");
}

TEST(YamlTreeTest, FindTakesTheFirstValueOfAMapOnly) {
  const YamlNode root = parse("k: first\nk: second\n");
  ASSERT_NE(root.find("k"), nullptr);
  EXPECT_EQ(root.find("k")->scalar, "first");
  EXPECT_EQ(root.find("missing"), nullptr);
  EXPECT_EQ(root.find("k")->find("k"), nullptr);  // a scalar has no keys
  EXPECT_EQ(parse("[k, v]").find("k"), nullptr);  // nor has a sequence
}

TEST(YamlTreeTest, NodesKnowWhereTheyStart) {
  const YamlNode root = parse("a: 1\nlist:\n  - x\n  - y\n");
  const YamlNode& y = root.find("list")->items.at(1);
  EXPECT_EQ(y.mark.line, 3);
  EXPECT_EQ(y.mark.column, 4);
}

TEST(YamlTreeTest, EmptyTextIsANullRoot) {
  EXPECT_EQ(parse("").kind, Kind::Null);
  EXPECT_EQ(parse("# only a comment\n").kind, Kind::Null);
}

TEST(YamlTreeTest, OnlyTheFirstDocumentIsRead) {
  const YamlNode root = parse("a: 1\n---\nb: 2\n");
  EXPECT_NE(root.find("a"), nullptr);
  EXPECT_EQ(root.find("b"), nullptr);
}

TEST(YamlTreeTest, TheStreamedListIsHandedOverItemByItemAndLeftEmpty) {
  std::vector<std::string> got;
  const YamlNode root = parse_yaml(
      "ignore_nan_inf:\n  - {api: a}\n  - {api: b}\n  - [c]\nother: [d]\n", "ignore_nan_inf",
      [&](YamlNode&& item, size_t index) {
        EXPECT_EQ(index, got.size());
        got.push_back(item.kind == Kind::Map ? item.find("api")->scalar : item.items.at(0).scalar);
      });
  EXPECT_EQ(got, (std::vector<std::string>{"a", "b", "c"}));
  ASSERT_EQ(root.find("ignore_nan_inf")->kind, Kind::Sequence);
  EXPECT_TRUE(root.find("ignore_nan_inf")->items.empty());
  EXPECT_EQ(root.find("other")->items.size(), 1u);  // other lists are kept
}

TEST(YamlTreeTest, OnlyATopLevelListUnderTheKeyIsStreamed) {
  const YamlNode root = parse_yaml("outer:\n  ignore_nan_inf: [a]\nignore_nan_inf: x\n",
                                   "ignore_nan_inf", kNoSink);
  EXPECT_EQ(root.find("outer")->find("ignore_nan_inf")->items.size(), 1u);
  EXPECT_EQ(root.find("ignore_nan_inf")->scalar, "x");
  EXPECT_EQ(parse_yaml("[ignore_nan_inf, [a]]", "ignore_nan_inf", kNoSink).items.size(), 2u);
}

TEST(YamlTreeTest, AliasesAreCopiesOfTheirAnchor) {
  const YamlNode root = parse("base: &b {api: add, n: 2}\nsame: *b\n");
  ASSERT_EQ(root.find("same")->kind, Kind::Map);
  EXPECT_EQ(root.find("same")->find("api")->scalar, "add");
  EXPECT_EQ(root.find("same")->find("n")->scalar, "2");
}

TEST(YamlTreeTest, AliasesExpandingPastAMillionNodesAreRefused) {
  std::string text = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 5; ++i) {
    const std::string prev = "*l" + std::to_string(i - 1);
    text += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) text += (k ? ", " : "") + prev;
    text += "]\n";
  }
  EXPECT_EQ(parse_error(text), "5: aliases expand to more than a million nodes");
}

TEST(YamlTreeTest, SyntaxErrorsAreParserExceptions) {
  EXPECT_EQ(parse_error("a: [1, 2\n"), "1: end of sequence flow not found");
  EXPECT_EQ(parse_error("a: *nowhere\n"), "0: the referenced anchor is not defined");
}

}  // namespace
}  // namespace msprobe
