#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/stack_sources.h"
#include "test_util.h"

using namespace msprobe;
namespace fs = std::filesystem;

TEST(StackSources, TheUsersFrameInFileLineCodeForm) {
  EXPECT_EQ(user_source_of_frame("File /home/me/train.py, line 12, in step, \n y = torch.exp(x)"),
            "/home/me/train.py:12: y = torch.exp(x)");
  EXPECT_EQ(user_source_of_frame("File <workdir>/a.py, line 3, in <module>, \n "),
            "<workdir>/a.py:3");
  // Frames of torch, msprobe and msprobe_cpp are not the user's.
  for (const char* tool :
       {"File <site-packages>/torch/nn/modules/module.py, line 1194, in _call_impl, \n x",
        "File /usr/lib/python3/dist-packages/torch/functional.py, line 5, in f, \n x",
        "File <site-packages>/msprobe/pytorch/hook_module/wrap_functional.py, line 98, in t, \n x",
        "File /work/python/msprobe_cpp/api_hooks.py, line 40, in wrapper, \n x"}) {
    EXPECT_EQ(user_source_of_frame(tool), "") << tool;
  }
  // A folder merely ending in "torch" is the user's.
  EXPECT_EQ(user_source_of_frame("File /home/me/mytorch/m.py, line 1, in f, \n y"),
            "/home/me/mytorch/m.py:1: y");
  EXPECT_EQ(user_source_of_frame("not a frame"), "");
  EXPECT_EQ(user_source_of_frame("File a.py, line x, in f"), "");
}

TEST(StackSources, ReadsOnlyTheCallsAskedForAndSurvivesDamage) {
  const msprobe::testing::TempDir dir;
  const fs::path path = dir / "stack.json";
  std::ofstream(path)
      << R"js({"A.a.0.forward": ["File <site-packages>/torch/x.py, line 1, in f, \n q",
                                                 "File /u/m.py, line 7, in g, \n y = a(x)"],
                             "B.b.0.forward": ["File /u/m.py, line 9, in g, \n z = b(y)"],
                             "C.c.0.forward": ["File /u/m.py, line 11, in g, \n)js";
  const auto sources = read_stack_sources(path.string(), {"A.a.0.forward", "C.c.0.forward"});
  ASSERT_EQ(sources.size(), 1u);  // B not asked for; C cut off mid-string
  EXPECT_EQ(sources.at("A.a.0.forward"), "/u/m.py:7: y = a(x)");
  EXPECT_TRUE(read_stack_sources((dir / "missing.json").string(), {"A.a.0.forward"}).empty());
}

TEST(StackSources, ReadsMsprobe26sGroupedStacks) {
  const msprobe::testing::TempDir dir;
  const fs::path path = dir / "stack.json";
  std::ofstream(path) << R"js({"0": [["A.a.0.forward", "B.b.0.forward"],
                                     ["File <site-packages>/torch/x.py, line 1, in f, \n q",
                                      "File /u/m.py, line 7, in g, \n y = a(x)"]],
                               "1": [["C.c.0.forward"], ["File /u/m.py, line 9, in g, \n z = c(y)"]]})js";
  const auto sources = read_stack_sources(path.string(), {"B.b.0.forward", "C.c.0.forward"});
  ASSERT_EQ(sources.size(), 2u);
  EXPECT_EQ(sources.at("B.b.0.forward"), "/u/m.py:7: y = a(x)");
  EXPECT_EQ(sources.at("C.c.0.forward"), "/u/m.py:9: z = c(y)");
}
