#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/output_files.h"
#include "core/step_folders.h"
#include "test_util.h"

using namespace msprobe;
using msprobe::testing::read_text;
using msprobe::testing::TempDir;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> names(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A write of `folder`, built: its dump.json holds `text`.
std::string build(const std::string& root, const std::string& folder, const std::string& text) {
  const std::string staged = staging_folder(root, folder);
  make_dirs(staged, root);
  write_file_atomic(staged + "/dump.json", text);
  return staged;
}

TEST(NaturalOrder, StepAndRankNumbersCompareAsNumbers) {
  std::vector<std::string> paths = {"d/step11/rank/dump.json",  "d/step8/rank/dump.json",
                                    "d/step8/rank10/dump.json", "d/step8/rank2/dump.json",
                                    "d/step100/rank/dump.json", "d/step09"};
  std::sort(paths.begin(), paths.end(), natural_less);
  EXPECT_EQ(paths,
            (std::vector<std::string>{"d/step8/rank/dump.json", "d/step8/rank2/dump.json",
                                      "d/step8/rank10/dump.json", "d/step09",
                                      "d/step11/rank/dump.json", "d/step100/rank/dump.json"}));
  EXPECT_FALSE(natural_less("step8", "step8"));
  EXPECT_TRUE(natural_less("step", "step0"));
}

}  // namespace

TEST(StepFolders, EachWriteIsBuiltApartUnderAHiddenNameOfItsRank) {
  const std::string a = staging_folder("/d", "step3/rank1");
  const std::string b = staging_folder("/d", "step3/rank1");
  EXPECT_NE(a, b);
  EXPECT_EQ(fs::path(a).filename(), "rank1");
  const std::string wrapper = fs::path(a).parent_path().filename().string();
  EXPECT_EQ(wrapper.rfind(".msprobe_cpp_partial.rank1.step3.", 0), 0u) << wrapper;
  EXPECT_TRUE(is_unfinished_folder(wrapper, "rank1"));
  EXPECT_FALSE(is_unfinished_folder(wrapper, "rank"));
  EXPECT_FALSE(is_unfinished_folder(wrapper, "rank10"));
  EXPECT_FALSE(is_unfinished_folder(".msprobe_cpp_partial.rank10.step3.1.1", "rank1"));
  EXPECT_FALSE(is_unfinished_folder("step3", "rank1"));
}

TEST(StepFolders, PublishedWholeAndReplacedWhole) {
  const TempDir temp;
  const std::string root = temp.path().string();
  publish_folder(build(root, "step0/rank0", "first"), root, "step0/rank0");
  EXPECT_EQ(names(root), std::vector<std::string>{"step0"});  // the wrapper became step0/
  EXPECT_EQ(read_text(temp / "step0/rank0/dump.json"), "first");

  publish_folder(build(root, "step0/rank1", "other rank"), root, "step0/rank1");
  EXPECT_EQ(names(temp / "step0"), (std::vector<std::string>{"rank0", "rank1"}));

  // Written again: the new folder in place of the old, nothing of either left aside.
  const std::string again = build(root, "step0/rank0", "second");
  write_file_atomic(again + "/stack.json", "{}");
  publish_folder(again, root, "step0/rank0");
  EXPECT_EQ(names(root), std::vector<std::string>{"step0"});
  EXPECT_EQ(names(temp / "step0/rank0"), (std::vector<std::string>{"dump.json", "stack.json"}));
  EXPECT_EQ(read_text(temp / "step0/rank0/dump.json"), "second");
  EXPECT_EQ(read_text(temp / "step0/rank1/dump.json"), "other rank");
}

TEST(StepFolders, AnEmptyStepFolderIsTakenOverAndAPlantedLinkRefused) {
  const TempDir temp;
  const std::string root = temp.path().string();
  fs::create_directory(temp / "step1");
  publish_folder(build(root, "step1/rank", "x"), root, "step1/rank");
  EXPECT_EQ(read_text(temp / "step1/rank/dump.json"), "x");

  fs::create_directory(temp / "elsewhere");
  fs::create_directory_symlink(temp / "elsewhere", temp / "step2");
  const std::string staged = build(root, "step2/rank", "y");
  const std::string error =
      msprobe::testing::error_of<WriteError>([&] { publish_folder(staged, root, "step2/rank"); });
  EXPECT_NE(error.find("is a symbolic link; refused"), std::string::npos) << error;
  EXPECT_TRUE(fs::is_empty(temp / "elsewhere"));
  EXPECT_EQ(read_text(fs::path(staged) / "dump.json"), "y");  // left for the caller to discard
  discard_staging(staged);
  EXPECT_EQ(names(root), (std::vector<std::string>{"elsewhere", "step1", "step2"}));
}

TEST(StepFolders, ATensorOfTheEarlierWriteIsCarriedOver) {
  const TempDir temp;
  const std::string from = temp.write("a.pt", "tensor bytes");
  link_or_copy(from, (temp / "b.pt").string());
  link_or_copy(from, (temp / "b.pt").string());  // already there: kept
  EXPECT_EQ(read_text(temp / "b.pt"), "tensor bytes");
  fs::remove(from);
  EXPECT_EQ(read_text(temp / "b.pt"), "tensor bytes");  // the removal of the old folder keeps it
}

TEST(StepFolders, OnlyThisRanksUnfinishedFoldersAreRemoved) {
  const TempDir temp;
  const std::string root = temp.path().string();
  build(root, "step4/rank1", "killed");
  build(root, "step5/rank1", "killed");
  const std::string other = build(root, "step4/rank10", "another rank, still writing");
  publish_folder(build(root, "step3/rank1", "whole"), root, "step3/rank1");
  temp.write(".msprobe_cpp_partial.rank1.x", "not a folder: removed, not counted");
  EXPECT_EQ(remove_unfinished_folders(root, "rank1"), 2u);
  EXPECT_EQ(names(root),
            (std::vector<std::string>{fs::path(other).parent_path().filename().string(), "step3"}));
  EXPECT_EQ(remove_unfinished_folders(root, "rank1"), 0u);
  EXPECT_EQ(remove_unfinished_folders((temp / "missing").string(), "rank1"), 0u);
}
