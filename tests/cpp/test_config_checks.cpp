#include "core/config_checks.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace msprobe::config_checks {
namespace {

using msprobe::testing::error_of;

template <class Call>
std::string error(Call&& call) {
  return error_of<ConfigError>(std::forward<Call>(call));
}

const Loc kAt("config.json", "task");

TEST(ConfigChecksTest, LocNamesTheSourceAndThePath) {
  const Loc file("config.json");
  EXPECT_EQ(file.str(), "config.json");
  EXPECT_EQ(file.child("overflow_check").child("rules").item(2).str(),
            "config.json: overflow_check.rules[2]");
  // A keyword argument's items follow its name directly.
  EXPECT_EQ(Loc("PrecisionDebugger(step=...)").item(1).str(), "PrecisionDebugger(step=...)[1]");
}

TEST(ConfigChecksTest, OddKeysAreQuotedOnOneLine) {
  const Loc file("config.json");
  EXPECT_EQ(file.child("dump-path_2").str(), "config.json: dump-path_2");
  EXPECT_EQ(file.child("a b").str(), "config.json: \"a b\"");
  EXPECT_EQ(file.child("").str(), "config.json: \"\"");
  EXPECT_EQ(file.child("x\ny").str(), "config.json: \"x\\ny\"");
}

TEST(ConfigChecksTest, ShowKeepsShortValuesWhole) {
  EXPECT_EQ(show(json("L7")), "\"L7\"");
  EXPECT_EQ(show(json::parse(R"({"a": [1, null, true]})")), "{\"a\":[1,null,true]}");
  EXPECT_EQ(show(json::array()), "[]");
}

TEST(ConfigChecksTest, ShowCutsLongValuesAtEightyCharacters) {
  json big = json::array();
  for (int i = 0; i < 1000; ++i) big.push_back(i);
  const std::string shown = show(big);
  EXPECT_EQ(shown.size(), 80u);
  EXPECT_EQ(shown.substr(0, 8), "[0,1,2,3");
  EXPECT_EQ(shown.substr(77), "...");
  // Never in the middle of a UTF-8 character: the cut at 77 bytes falls inside an 'é'.
  std::string text(75, 'a');
  for (int i = 0; i < 10; ++i) text += "\xC3\xA9";
  EXPECT_EQ(show(json(text)), "\"" + std::string(75, 'a') + "...");
}

TEST(ConfigChecksTest, ShowStopsAtSixteenLevels) {
  json deep = 1;
  for (int i = 0; i < 100000; ++i) deep = json::array({std::move(deep)});
  EXPECT_EQ(show(deep), std::string(16, '[') + "[...]" + std::string(16, ']'));
  json object = json::object({{"k", json::object({{"k", 1}})}});
  EXPECT_EQ(show(object), "{\"k\":{\"k\":1}}");
}

TEST(ConfigChecksTest, FailSaysWhereWhatAndWhatCame) {
  EXPECT_EQ(error([] { fail(kAt, "one of a, b", json(3)); }),
            "config.json: task: expected one of a, b, got 3");
  EXPECT_EQ(error([] { fail_missing(kAt, "a task"); }),
            "config.json: task: expected a task, got nothing");
}

TEST(ConfigChecksTest, JoinAndFind) {
  EXPECT_EQ(join({}), "");
  EXPECT_EQ(join({"a"}), "a");
  EXPECT_EQ(join({"a", "b", "c"}, " | "), "a | b | c");
  const json object = json::parse(R"({"a": 1})");
  ASSERT_NE(find(object, "a"), nullptr);
  EXPECT_EQ(*find(object, "a"), 1);
  EXPECT_EQ(find(object, "b"), nullptr);
}

TEST(ConfigChecksTest, UnknownKeysGetADidYouMeanOrTheKnownList) {
  const Loc at("config.json");
  EXPECT_EQ(error([&] {
              check_keys(json::parse(R"({"levle": 1, "task": 2, "zzz": 3})"), at,
                         {"task", "level"}, {"is_deterministic"});
            }),
            "config.json: levle: unknown key; did you mean \"level\"?\n"
            "config.json: zzz: unknown key; allowed: task, level");
  EXPECT_EQ(error([&] { check_keys(json::parse(R"({"TASK": 1})"), at, {"task"}); }),
            "config.json: TASK: unknown key; did you mean \"task\"?");
  // Ignored keys are accepted without being listed.
  EXPECT_EQ(error([&] { check_keys(json::parse(R"({"seed": 1})"), at, {"task"}, {"seed"}); }),
            msprobe::testing::kAccepted);
  // Short names allow one edit, longer ones two.
  EXPECT_EQ(error([&] { check_keys(json::parse(R"({"sep": 1})"), at, {"step"}); }),
            "config.json: sep: unknown key; did you mean \"step\"?");
  EXPECT_EQ(error([&] { check_keys(json::parse(R"({"sp": 1})"), at, {"step"}); }),
            "config.json: sp: unknown key; allowed: step");
  EXPECT_EQ(error([&] { check_keys(json::parse(R"({"dmp_pth": 1})"), at, {"dump_path"}); }),
            "config.json: dmp_pth: unknown key; did you mean \"dump_path\"?");
}

TEST(ConfigChecksTest, ErrorListTellsEachLineOnce) {
  ErrorList errors;
  EXPECT_EQ(error([&] { errors.throw_if_any(); }), msprobe::testing::kAccepted);
  errors.attempt([] { fail(Loc("a.json", "x"), "true or false", json(1)); });
  errors.attempt([] {});
  errors.add("a.json: x: expected true or false, got 1");
  errors.add("second");
  EXPECT_TRUE(errors.mentions("true or false"));
  EXPECT_FALSE(errors.mentions("third"));
  EXPECT_EQ(error([&] { errors.throw_if_any(); }),
            "a.json: x: expected true or false, got 1\nsecond");
}

TEST(ConfigChecksTest, AsInt64TakesJsonIntegersOnly) {
  EXPECT_EQ(as_int64(json(-3)), -3);
  EXPECT_EQ(as_int64(json(9223372036854775807ULL)), INT64_MAX);
  EXPECT_EQ(as_int64(json(9223372036854775808ULL)), std::nullopt);
  EXPECT_EQ(as_int64(json(3.0)), std::nullopt);
  EXPECT_EQ(as_int64(json(true)), std::nullopt);
  EXPECT_EQ(as_int64(json("3")), std::nullopt);
}

TEST(ConfigChecksTest, TypedReads) {
  EXPECT_TRUE(parse_bool(json(true), kAt));
  EXPECT_EQ(error([] { parse_bool(json(1), kAt); }),
            "config.json: task: expected true or false, got 1");
  EXPECT_EQ(parse_nonempty_string(json("x"), kAt), "x");
  EXPECT_EQ(error([] { parse_nonempty_string(json(""), kAt); }),
            "config.json: task: expected a non-empty string, got \"\"");
  EXPECT_EQ(parse_string_list(json::parse(R"(["a", "b"])"), kAt),
            (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(parse_string_list(json::array(), kAt).empty());
  EXPECT_EQ(error([] { parse_string_list(json("a"), kAt); }),
            "config.json: task: expected a list of non-empty strings, got \"a\"");
  EXPECT_EQ(error([] { parse_string_list(json::parse(R"(["a", null])"), kAt); }),
            "config.json: task[1]: expected a non-empty string, got null");
}

TEST(ConfigChecksTest, ApiNamesNeedAKnownPrefixAndAPlainName) {
  EXPECT_EQ(parse_api_names(json::parse(R"(["Tensor.view", "Torch.linalg.norm", "VF.lstm"])"), kAt),
            (std::vector<std::string>{"Tensor.view", "Torch.linalg.norm", "VF.lstm"}));
  const std::string allowed =
      "expected an API named as in call names: Functional.x, Tensor.x, Torch.x, Distributed.x, "
      "VF.x (\"Tensor.view\"), got ";
  for (const char* bad : {"view", "torch.view", "Tensor.", "Tensor..view", "Torch.norm.",
                          "Torch.linalg..norm", "Tensor.view()", "Aten.add"}) {
    EXPECT_EQ(error([&] { parse_api_names(json::array({bad}), kAt); }),
              "config.json: task[0]: " + allowed + json(bad).dump())
        << bad;
  }
}

enum class Color { Red, Green };
constexpr EnumName<Color> kColors[] = {{"red", Color::Red}, {"green", Color::Green}};

TEST(ConfigChecksTest, EnumsByName) {
  EXPECT_EQ(enum_names(kColors), "red, green");
  EXPECT_STREQ(name_of(kColors, Color::Green), "green");
  EXPECT_STREQ(name_of(kColors, static_cast<Color>(7)), "unknown");
  EXPECT_EQ(parse_enum(json("red"), kAt, kColors), Color::Red);
  EXPECT_EQ(error([] { parse_enum(json("Red"), kAt, kColors); }),
            "config.json: task: expected one of red, green, got \"Red\"");
  EXPECT_EQ(error([] { parse_enum(json(0), kAt, kColors); }),
            "config.json: task: expected one of red, green, got 0");
}

}  // namespace
}  // namespace msprobe::config_checks
