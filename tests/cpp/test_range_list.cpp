#include "core/range_list.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace msprobe {
namespace {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

TEST(RangeListTest, EmptyMeansAllAndLastIsZero) {
  const RangeList all;
  EXPECT_TRUE(all.all());
  EXPECT_TRUE(all.contains(0));
  EXPECT_TRUE(all.contains(-5));
  EXPECT_TRUE(all.contains(kMax));
  EXPECT_EQ(all.last(), 0);
  EXPECT_TRUE(RangeList(Ranges{}).all());
}

TEST(RangeListTest, BoundsAreInclusive) {
  const RangeList list(Ranges{{4, 6}});
  EXPECT_FALSE(list.all());
  EXPECT_FALSE(list.contains(3));
  EXPECT_TRUE(list.contains(4));
  EXPECT_TRUE(list.contains(5));
  EXPECT_TRUE(list.contains(6));
  EXPECT_FALSE(list.contains(7));
  EXPECT_EQ(list.last(), 6);
}

TEST(RangeListTest, RangesAreSortedAndGapsStayOut) {
  const RangeList list(Ranges{{10, 12}, {1, 1}, {5, 6}});
  EXPECT_EQ(list.ranges(), (Ranges{{1, 1}, {5, 6}, {10, 12}}));
  EXPECT_TRUE(list.contains(1));
  EXPECT_FALSE(list.contains(2));
  EXPECT_FALSE(list.contains(4));
  EXPECT_TRUE(list.contains(6));
  EXPECT_FALSE(list.contains(9));
  EXPECT_TRUE(list.contains(11));
  EXPECT_FALSE(list.contains(0));
  EXPECT_EQ(list.last(), 12);
}

TEST(RangeListTest, OverlappingAdjacentAndNestedRangesMerge) {
  EXPECT_EQ(RangeList(Ranges{{1, 3}, {2, 5}}).ranges(), (Ranges{{1, 5}}));
  EXPECT_EQ(RangeList(Ranges{{1, 3}, {4, 5}}).ranges(), (Ranges{{1, 5}}));
  EXPECT_EQ(RangeList(Ranges{{1, 10}, {3, 4}}).ranges(), (Ranges{{1, 10}}));
  EXPECT_EQ(RangeList(Ranges{{1, 3}, {5, 5}}).ranges(), (Ranges{{1, 3}, {5, 5}}));
  EXPECT_EQ(RangeList(Ranges{{7, 7}, {7, 7}}).ranges(), (Ranges{{7, 7}}));
}

TEST(RangeListTest, EverySingleStepListedBecomesOneRange) {
  Ranges steps;
  for (int64_t s = 99999; s >= 0; --s) steps.push_back({s, s});
  const RangeList list(std::move(steps));
  EXPECT_EQ(list.ranges(), (Ranges{{0, 99999}}));
  EXPECT_TRUE(list.contains(50000));
  EXPECT_FALSE(list.contains(100000));
}

TEST(RangeListTest, ExtremeBoundsDoNotOverflow) {
  const RangeList list(Ranges{{kMin, kMin}, {kMax - 1, kMax}, {kMax, kMax}});
  EXPECT_EQ(list.ranges(), (Ranges{{kMin, kMin}, {kMax - 1, kMax}}));
  EXPECT_TRUE(list.contains(kMin));
  EXPECT_FALSE(list.contains(kMin + 1));
  EXPECT_TRUE(list.contains(kMax));
  EXPECT_EQ(list.last(), kMax);
}

}  // namespace
}  // namespace msprobe
