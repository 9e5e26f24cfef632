#include "core/spill_file.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace msprobe {
namespace {

// Everything replay() hands over, and how many chunks it came in.
std::string replayed(SpillFile& file, size_t* chunks = nullptr) {
  std::string all;
  size_t n = 0;
  file.replay([&](const std::string& chunk) {
    EXPECT_FALSE(chunk.empty());
    all += chunk;
    ++n;
  });
  if (chunks) *chunks = n;
  return all;
}

TEST(SpillFileTest, AnEmptyFileReplaysNothing) {
  SpillFile file;
  size_t chunks = 99;
  EXPECT_EQ(replayed(file, &chunks), "");
  EXPECT_EQ(chunks, 0u);
  EXPECT_EQ(file.count, 0u);
}

TEST(SpillFileTest, AppendsComeBackInOrderAndAreCounted) {
  SpillFile file;
  file.append("{\"a\": 1}");
  file.append("");
  file.append(std::string("b\0c\n", 4));
  EXPECT_EQ(file.count, 3u);
  EXPECT_EQ(replayed(file), std::string("{\"a\": 1}b\0c\n", 12));
}

TEST(SpillFileTest, ABigFileComesInSeveralChunksWholeAndInOrder) {
  SpillFile file;
  std::string expected;
  for (int i = 0; i < 20000; ++i) {
    const std::string member = "member " + std::to_string(i) + "\n";
    file.append(member);
    expected += member;
  }
  ASSERT_GT(expected.size(), size_t{1} << 16);
  size_t chunks = 0;
  EXPECT_EQ(replayed(file, &chunks), expected);
  EXPECT_GE(chunks, 2u);
  EXPECT_EQ(file.count, 20000u);
}

TEST(SpillFileTest, EachReplayStartsFromTheBeginning) {
  SpillFile file;
  file.append("one,");
  file.append("two");
  EXPECT_EQ(replayed(file), "one,two");
  EXPECT_EQ(replayed(file), "one,two");
}

}  // namespace
}  // namespace msprobe
