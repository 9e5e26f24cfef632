#include <gtest/gtest.h>

#include <string>

#include "core/function_ref.h"

using namespace msprobe;

namespace {

int apply(FunctionRef<int(int)> f, int x) { return f(x); }

std::string join(FunctionRef<std::string(const std::string&, int)> f) { return f("a", 2); }

int twice(int x) { return 2 * x; }

}  // namespace

TEST(FunctionRef, CallsLambdasWithTheirCaptures) {
  int offset = 10;
  EXPECT_EQ(apply([&](int x) { return x + offset; }, 1), 11);
  offset = 20;  // a reference, not a copy: it sees the change
  auto add = [&](int x) { return x + offset; };
  EXPECT_EQ(apply(add, 1), 21);
}

// A function itself is no object to point at: it is passed as a pointer variable.
TEST(FunctionRef, CallsFunctionPointersAndMutableCallables) {
  int (*pointer)(int) = twice;
  EXPECT_EQ(apply(pointer, 4), 8);
  int calls = 0;
  auto counting = [&calls](int x) mutable { return x + ++calls; };
  EXPECT_EQ(apply(counting, 0), 1);
  EXPECT_EQ(apply(counting, 0), 2);
  EXPECT_EQ(calls, 2);
}

TEST(FunctionRef, PassesReferenceArgumentsAndReturnsValues) {
  EXPECT_EQ(join([](const std::string& s, int n) {
              std::string out;
              for (int i = 0; i < n; ++i) out += s;
              return out;
            }),
            "aa");
}

TEST(FunctionRef, CopiesReferToTheSameCallable) {
  int seen = 0;
  auto record = [&seen](int x) { seen = x; };
  FunctionRef<void(int)> a(record);
  FunctionRef<void(int)> b = a;  // copy, not a wrapper around a
  b(7);
  EXPECT_EQ(seen, 7);
}
