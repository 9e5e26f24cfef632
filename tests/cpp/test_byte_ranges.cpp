#include <gtest/gtest.h>

#include "core/byte_ranges.h"

namespace msprobe {
namespace {

TEST(ByteRanges, AnEmptySetCoversOnlyEmptyRanges) {
  ByteRanges r;
  EXPECT_TRUE(r.covers(5, 5));
  EXPECT_FALSE(r.covers(0, 1));
}

TEST(ByteRanges, SlicesWrittenOneAfterAnotherMergeIntoOneRange) {
  // DeepSpeed's gradient partition: each parameter's slice copied after the one before.
  ByteRanges r;
  for (uint64_t off = 0; off < 4000; off += 400) r.add(off, off + 400);
  EXPECT_EQ(r.size(), 1u);
  EXPECT_TRUE(r.covers(0, 4000));
  EXPECT_FALSE(r.covers(0, 4001));
  EXPECT_FALSE(r.covers(3999, 4400));
}

TEST(ByteRanges, AGapIsNotCoveredAndFillingItJoinsBothSides) {
  ByteRanges r;
  r.add(0, 100);
  r.add(200, 300);
  EXPECT_EQ(r.size(), 2u);
  EXPECT_TRUE(r.covers(10, 90));
  EXPECT_TRUE(r.covers(200, 300));
  EXPECT_FALSE(r.covers(100, 200));
  EXPECT_FALSE(r.covers(50, 250));  // partly written: not covered
  r.add(150, 160);
  EXPECT_EQ(r.size(), 3u);
  r.add(90, 210);  // overlaps all three
  EXPECT_EQ(r.size(), 1u);
  EXPECT_TRUE(r.covers(0, 300));
}

TEST(ByteRanges, RangesAddedOutOfOrderStaySortedAndDisjoint) {
  ByteRanges r;
  r.add(500, 600);
  r.add(0, 10);
  r.add(250, 260);
  r.add(600, 700);  // touches the first one added
  EXPECT_EQ(r.size(), 3u);
  EXPECT_TRUE(r.covers(500, 700));
  EXPECT_TRUE(r.covers(250, 260));
  EXPECT_FALSE(r.covers(10, 11));
  r.add(7, 7);  // empty: nothing changes
  EXPECT_EQ(r.size(), 3u);
}

}  // namespace
}  // namespace msprobe
