#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/output_files.h"
#include "test_util.h"

using namespace msprobe;
using msprobe::testing::read_text;
using msprobe::testing::TempDir;
namespace fs = std::filesystem;

namespace {}  // namespace

TEST(OutputFiles, TemporaryNames) {
  EXPECT_TRUE(is_temporary_name("dump.json.tmp.a1B2c3"));
  EXPECT_TRUE(is_temporary_name("dump.json.tmp.12345"));  // an older version's pid
  EXPECT_TRUE(is_temporary_name("Torch.a.0.forward.input.0.pt.tmp.Zz9Yy8"));
  EXPECT_FALSE(is_temporary_name("dump.json"));
  EXPECT_FALSE(is_temporary_name("Module.x.tmp.pt"));  // a module named tmp
  EXPECT_FALSE(is_temporary_name("Module.tmp.Linear.forward.0.input.0.pt"));
  EXPECT_FALSE(is_temporary_name(".tmp.abcdef"));
}

TEST(OutputFiles, AtomicWriteNeverFollowsAPlantedLinkAndLeavesNoTemporary) {
  const TempDir temp;
  const fs::path& dir = temp.path();
  const fs::path victim = dir / "victim";
  std::ofstream(victim) << "precious";
  // The name older versions used: a link there must not be written through.
  fs::create_symlink(victim, dir / ("dump.json.tmp." + std::to_string(getpid())));
  write_file_atomic((dir / "dump.json").string(), "{}");
  EXPECT_EQ(read_text(victim), "precious");
  EXPECT_EQ(read_text(dir / "dump.json"), "{}");
  struct stat st {};
  ASSERT_EQ(stat((dir / "dump.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  size_t temporaries = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    temporaries += e.path().filename().string().rfind("dump.json.tmp.", 0) == 0 &&
                   !fs::is_symlink(e.symlink_status());
  }
  EXPECT_EQ(temporaries, 0u);
}

TEST(OutputFiles, StaleTemporariesAreRemovedLinksAreNotFollowed) {
  const TempDir temp;
  const fs::path& dir = temp.path();
  const TempDir temp_elsewhere;
  const fs::path& elsewhere = temp_elsewhere.path();
  fs::create_directories(dir / "dump_tensor_data");
  std::ofstream(dir / "dump.json.tmp.Ab12Cd") << "half";
  std::ofstream(dir / "dump_tensor_data" / "x.input.0.pt.tmp.4242") << "half";
  std::ofstream(dir / "dump.json") << "{}";
  std::ofstream(elsewhere / "keep.json.tmp.Ab12Cd") << "not ours";
  fs::create_directory_symlink(elsewhere, dir / "link");
  EXPECT_EQ(remove_stale_temporaries(dir.string()), 2u);
  EXPECT_TRUE(fs::exists(dir / "dump.json"));
  EXPECT_FALSE(fs::exists(dir / "dump.json.tmp.Ab12Cd"));
  EXPECT_TRUE(fs::exists(elsewhere / "keep.json.tmp.Ab12Cd"));
  EXPECT_EQ(remove_stale_temporaries((dir / "missing").string()), 0u);
}

TEST(OutputFiles, FoldersAre0750WhateverTheUmask) {
  const TempDir temp;
  const fs::path& dir = temp.path();
  const mode_t old = umask(077);
  make_dirs((dir / "step0" / "rank").string());
  umask(old);
  struct stat st {};
  ASSERT_EQ(stat((dir / "step0" / "rank").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0750u);
}

TEST(OutputFiles, SafeFileStems) {
  EXPECT_EQ(safe_file_stem("Module./../../ESCAPED.Linear.forward.0.input.0"),
            "Module._.._.._ESCAPED.Linear.forward.0.input.0");
  EXPECT_EQ(safe_file_stem(std::string("Module.a\0b.L.forward.0", 22)), "Module.a_b.L.forward.0");
  EXPECT_EQ(safe_file_stem("a\nb\\c"), "a_b_c");
  EXPECT_EQ(safe_file_stem(".."), "_..");
  const std::string long_a(300, 'a'), long_b = std::string(299, 'a') + "b";
  EXPECT_LE(safe_file_stem(long_a).size(), 200u);
  EXPECT_NE(safe_file_stem(long_a), safe_file_stem(long_b));
  EXPECT_EQ(safe_file_stem("Functional.linear.0.forward.input.0"),
            "Functional.linear.0.forward.input.0");
}

TEST(OutputFiles, CollidingNamesAreDisambiguated) {
  FileNames names;
  EXPECT_EQ(names.claim("Module.a/b.x"), "Module.a_b.x");
  EXPECT_EQ(names.claim("Module.a_b.x"), "Module.a_b.x~2");
  EXPECT_EQ(names.claim("Module.a\1b.x"), "Module.a_b.x~3");
  names.clear();
  EXPECT_EQ(names.claim("Module.a_b.x"), "Module.a_b.x");
}

TEST(OutputFiles, EmptyFoldersAreRemovedUpToButNotIncludingTheRoot) {
  const TempDir temp_root;
  const fs::path& root = temp_root.path();
  make_dirs((root / "step0" / "rank" / "dump_tensor_data").string());
  make_dirs((root / "step1" / "rank").string());
  std::ofstream(root / "step1" / "keep.txt") << "x";
  remove_empty_folders((root / "step0" / "rank" / "dump_tensor_data").string(), root.string());
  remove_empty_folders((root / "step1" / "rank").string(), root.string());
  EXPECT_TRUE(fs::exists(root));
  EXPECT_FALSE(fs::exists(root / "step0"));
  EXPECT_FALSE(fs::exists(root / "step1" / "rank"));
  EXPECT_TRUE(fs::exists(root / "step1" / "keep.txt"));
  // A folder outside the root is never touched.
  const TempDir temp_outside;
  const fs::path& outside = temp_outside.path();
  remove_empty_folders(outside.string(), root.string());
  EXPECT_TRUE(fs::exists(outside));
}

TEST(OutputFiles, AFullDiskFailsTheWriteAndLeavesNothing) {
  const TempDir temp;
  const fs::path& dir = temp.path();
  set_write_budget_for_testing(10);
  write_file_atomic((dir / "small").string(), "0123456789");
  const std::string error = msprobe::testing::error_of<WriteError>(
      [&] { write_file_atomic((dir / "big").string(), "x"); });
  EXPECT_NE(error.find("No space left on device"), std::string::npos) << error;
  set_write_budget_for_testing(-1);
  EXPECT_EQ(read_text(dir / "small"), "0123456789");
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) files += entry.is_regular_file();
  EXPECT_EQ(files, 1u);  // no temporary, no partial "big"
}

// Every rank appends its free_benchmark rows to one CSV: however the processes race, the file
// holds one header, first, and every line whole. The children start together (they wait for the
// gate pipe to close), and the race is run many times over.
TEST(OutputFiles, ProcessesAppendingToOneFileLeaveOneHeaderFirstAndWholeLines) {
  const TempDir temp;
  constexpr int kProcesses = 8;
  constexpr int kRows = 5;
  for (int round = 0; round < 40; ++round) {
    const std::string path = (temp.path() / ("rows" + std::to_string(round) + ".csv")).string();
    int gate[2];
    ASSERT_EQ(pipe(gate), 0);
    std::vector<pid_t> children;
    for (int p = 0; p < kProcesses; ++p) {
      const pid_t pid = fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        close(gate[1]);
        char c;
        while (read(gate[0], &c, 1) > 0) {
        }
        for (int r = 0; r < kRows; ++r) {
          append_to_shared_file(path, "header\r\n",
                                std::to_string(p) + std::string(100, 'x') + "\r\n");
        }
        _exit(0);
      }
      children.push_back(pid);
    }
    close(gate[0]);
    close(gate[1]);
    for (const pid_t pid : children) {
      int status = 0;
      ASSERT_EQ(waitpid(pid, &status, 0), pid);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    std::istringstream lines(read_text(path));
    std::string line;
    ASSERT_TRUE(std::getline(lines, line));
    ASSERT_EQ(line, "header\r") << "round " << round;
    std::vector<int> rows(kProcesses, 0);
    while (std::getline(lines, line)) {
      ASSERT_EQ(line.size(), 102u) << "round " << round << ": " << line;
      ++rows.at(static_cast<size_t>(line[0] - '0'));
    }
    ASSERT_EQ(rows, std::vector<int>(kProcesses, kRows)) << "round " << round;
  }
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(temp.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 40u);  // no temporary left behind
}

TEST(OutputFiles, AppendingNeverFollowsALinkAtTheFilesName) {
  const TempDir temp;
  const fs::path victim = temp.path() / "victim";
  std::ofstream(victim) << "precious";
  fs::create_symlink(victim, temp.path() / "rows.csv");
  EXPECT_THROW(append_to_shared_file((temp.path() / "rows.csv").string(), "h\n", "row\n"),
               WriteError);
  EXPECT_EQ(read_text(victim), "precious");
}
