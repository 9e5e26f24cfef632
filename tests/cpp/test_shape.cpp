#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "core/shape.h"

using namespace msprobe;

namespace {

// Six dimensions live inline; a seventh moves them to the heap. Each test crosses that line.
std::vector<int64_t> dims(int n) {
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(i + 2);
  return out;
}

}  // namespace

TEST(Shape, KeepsDimensionsInOrderOnBothSidesOfTheInlineLimit) {
  for (int n : {0, 1, 6, 7, 12}) {
    const Shape s(dims(n));
    EXPECT_EQ(s.size(), static_cast<size_t>(n));
    EXPECT_EQ(s.empty(), n == 0);
    EXPECT_EQ(s.to_vector(), dims(n)) << n << " dimensions";
    for (int i = 0; i < n; ++i) EXPECT_EQ(s[i], i + 2);
  }
}

TEST(Shape, CopiesAreIndependent) {
  for (int n : {3, 9}) {
    Shape a(dims(n));
    Shape b(a);
    a.push_back(99);
    EXPECT_EQ(b.to_vector(), dims(n));
    EXPECT_EQ(a.size(), static_cast<size_t>(n) + 1);
    Shape c;
    c = a;
    a.clear();
    EXPECT_EQ(c.size(), static_cast<size_t>(n) + 1);
    EXPECT_EQ(c[n], 99);
    EXPECT_TRUE(a.empty());
  }
}

TEST(Shape, MovesLeaveTheSourceEmpty) {
  for (int n : {4, 8}) {
    Shape a(dims(n));
    Shape b(std::move(a));
    EXPECT_EQ(b.to_vector(), dims(n));
    EXPECT_TRUE(a.empty());  // NOLINT: a moved-from Shape is defined to be empty
    Shape c({1});
    c = std::move(b);
    EXPECT_EQ(c.to_vector(), dims(n));
    EXPECT_TRUE(b.empty());  // NOLINT: as above
    a.push_back(5);          // still usable after the move
    EXPECT_EQ(a.to_vector(), std::vector<int64_t>({5}));
  }
}

TEST(Shape, SelfAssignmentKeepsTheDimensions) {
  Shape s(dims(7));
  const Shape& same = s;
  s = same;
  EXPECT_EQ(s.to_vector(), dims(7));
}

TEST(Shape, EqualityComparesLengthAndEveryDimension) {
  EXPECT_EQ(Shape({2, 3}), Shape(std::vector<int64_t>{2, 3}));
  EXPECT_NE(Shape({2, 3}), Shape({2, 3, 1}));
  EXPECT_NE(Shape({2, 3}), Shape({3, 2}));
  EXPECT_EQ(Shape(dims(10)), Shape(dims(10)));
  EXPECT_NE(Shape(dims(10)), Shape(dims(11)));
  EXPECT_EQ(Shape(), Shape(std::vector<int64_t>{}));
}
