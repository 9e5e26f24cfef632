// Tests of config.json files and texts (docs/config.md): reading, positions of JSON errors, and
// the file named in every message.

#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "core/config.h"
#include "test_util.h"

namespace msprobe {
namespace {

using msprobe::testing::error_of;
using msprobe::testing::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

std::string load_error(const std::string& path) {
  return error_of<ConfigError>([&] { load_config_file(path); });
}

TEST(ConfigFileTest, LoadsAndResolvesRulesNextToTheFile) {
  TempDir dir;
  std::string path = dir.write("config.json", R"({
    "task": "overflow_check", "dump_path": "./dump",
    "overflow_check": {"rules": ["more_rules.yaml", "/abs/other.yaml"]}
  })");
  Config c = load_config_file(path, json{{"level", "mix"}});
  EXPECT_EQ(c.task, Task::OverflowCheck);
  EXPECT_EQ(c.level, Level::Mix);
  ASSERT_EQ(c.overflow_check.rules.size(), 2u);
  EXPECT_EQ(fs::path(c.overflow_check.rules[0]),
            fs::weakly_canonical(dir.path()) / "more_rules.yaml");
  EXPECT_EQ(c.overflow_check.rules[1], "/abs/other.yaml");
}

TEST(ConfigFileTest, ValidationErrorsNameTheFile) {
  TempDir dir;
  std::string path = dir.write("config.json", R"({"dump_path": "d", "levle": "L1"})");
  EXPECT_EQ(load_error(path), path + R"(: levle: unknown key; did you mean "level"?)");
}

TEST(ConfigFileTest, MissingFile) {
  TempDir dir;
  std::string path = (dir.path() / "nope.json").string();
  EXPECT_EQ(load_error(path), path + ": cannot read config file: No such file or directory");
}

TEST(ConfigFileTest, DirectoryInsteadOfFile) {
  TempDir dir;
  EXPECT_EQ(load_error(dir.path().string()),
            dir.path().string() + ": cannot read config file: is a directory");
}

TEST(ConfigFileTest, UnreadableFile) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads any file";
  TempDir dir;
  std::string path = dir.write("config.json", R"({"dump_path": "d"})");
  fs::permissions(path, fs::perms::none);
  EXPECT_EQ(load_error(path), path + ": cannot read config file: Permission denied");
}

TEST(ConfigFileTest, BadJsonReportsLineAndColumn) {
  TempDir dir;
  std::string path =
      dir.write("config.json", "{\n  \"dump_path\": \"d\",\n  \"task\": \"tensor\",\n}\n");
  EXPECT_EQ(load_error(path), path + ":4:1: invalid JSON: unexpected '}'; expected string literal");

  path = dir.write("literal.json", "{\n  \"dump_path\": \"d\",\n  \"compat\": tru\n}");
  EXPECT_EQ(load_error(path), path +
                                  ":3:16: invalid JSON: invalid literal; last read: "
                                  "'\"compat\": tru<U+000A>'");

  // Columns count characters: the two-byte "é" is one column.
  path = dir.write("utf8.json", "{\"dump_path\": \"\xC3\xA9\" x}");
  EXPECT_EQ(
      load_error(path),
      path + ":1:19: invalid JSON: invalid literal; last read: '\"\xC3\xA9\" x'; expected '}'");
}

TEST(ConfigFileTest, EmptyFileAndTruncatedFile) {
  TempDir dir;
  std::string path = dir.write("empty.json", "");
  EXPECT_EQ(load_error(path),
            path + ":1:1: invalid JSON: unexpected end of input; expected '[', '{', or a literal");
  path = dir.write("cut.json", "{\"dump_path\": \"d\",\n");
  EXPECT_EQ(load_error(path),
            path + ":2:1: invalid JSON: unexpected end of input; expected string literal");
}

// json::parse would throw this as out_of_range, without a position; the reported column is the last
// character read, as for every JSON error.
TEST(ConfigFileTest, NumberOverflowHasAPosition) {
  TempDir dir;
  std::string path = dir.write("big.json",
                               "{\"dump_path\": \"d\",\n \"overflow_check\": "
                               "{\"mutation_threshold\": 1e400}}");
  EXPECT_EQ(load_error(path), path + ":2:47: invalid JSON: number overflow parsing '1e400'");
}

TEST(ConfigFileTest, RootMustBeAnObject) {
  TempDir dir;
  std::string path = dir.write("list.json", "[]");
  EXPECT_EQ(load_error(path), path + ": expected a JSON object, got []");
}

// The text entry point (the fuzz target's) reports like the file one, naming `source`.
TEST(ConfigTextTest, ParsesValidatesAndPositionsErrors) {
  const Config c =
      parse_config_text(R"({"dump_path": "d", "overflow_check": {"rules": ["r.yaml"]}})",
                        "cfg.json", json::object(), "/base");
  EXPECT_EQ(c.dump_path, "d");
  EXPECT_EQ(c.overflow_check.rules, std::vector<std::string>{"/base/r.yaml"});
  auto error = [](const std::string& text) {
    return error_of<ConfigError>([&] { parse_config_text(text, "cfg.json"); });
  };
  EXPECT_EQ(error("{\"dump_path\": \"d\",\n 1}"),
            "cfg.json:2:2: invalid JSON: unexpected number literal; expected string literal");
  EXPECT_EQ(error(R"({"dump_path": 1})"),
            "cfg.json: dump_path: expected a non-empty string, got 1");
}

}  // namespace
}  // namespace msprobe
