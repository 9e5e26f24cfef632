// Guarded and FileNames from several threads at once: the core's part of the threading contract,
// checked under ThreadSanitizer too (-DMSPROBE_TSAN=ON).
// The lock order is checked in debug builds only; this file is one whatever the build's type
// (no other file of core_tests instantiates a Guarded, so none differs from these).
#undef NDEBUG
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/guarded.h"
#include "core/output_files.h"

namespace msprobe {
namespace {

constexpr int kThreads = 4;
constexpr int kPerThread = 2000;

TEST(Guarded, EveryUpdateFromEveryThreadLands) {
  struct Counts {
    std::vector<int> seen;
    int64_t total = 0;
  };
  Guarded<Counts> counts(LockLevel::Leaf);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&counts, t] {
      for (int i = 0; i < kPerThread; ++i) {
        counts.with_lock([&](Counts& c) {
          c.seen.push_back(t);
          ++c.total;
        });
      }
    });
  }
  for (std::thread& th : threads) th.join();
  const auto [total, size] =
      counts.with_lock([](const Counts& c) { return std::make_pair(c.total, c.seen.size()); });
  EXPECT_EQ(total, kThreads * kPerThread);
  EXPECT_EQ(size, static_cast<size_t>(kThreads * kPerThread));
}

TEST(Guarded, ReturnsWhatTheFunctionReturns) {
  Guarded<std::string> text(LockLevel::Leaf, "abc");
  EXPECT_EQ(text.with_lock([](std::string& s) { return s.size(); }), 3u);
  text.with_lock([](std::string& s) { s += "d"; });
  const Guarded<std::string>& view = text;
  EXPECT_EQ(view.with_lock([](const std::string& s) { return s; }), "abcd");
}

TEST(FileNames, ThreadsClaimingTheSameStemGetDistinctNames) {
  FileNames names;
  names.set_dir("/tmp/step0/rank/dump_tensor_data");
  Guarded<std::vector<std::string>> claimed(LockLevel::Leaf);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        std::string name = names.claim("Torch.add.0.forward.input.0");
        const std::string dir = names.dir();
        EXPECT_EQ(dir, "/tmp/step0/rank/dump_tensor_data");
        claimed.with_lock([&](std::vector<std::string>& v) { v.push_back(std::move(name)); });
      }
    });
  }
  for (std::thread& th : threads) th.join();
  claimed.with_lock([](const std::vector<std::string>& v) {
    EXPECT_EQ(v.size(), static_cast<size_t>(kThreads * 200));
    EXPECT_EQ(std::set<std::string>(v.begin(), v.end()).size(), v.size());
    EXPECT_EQ(std::count(v.begin(), v.end(), "Torch.add.0.forward.input.0"), 1);
  });
}

TEST(GuardedLockOrder, AThreadTakesLocksByLevel) {
  Guarded<int> step(LockLevel::Step, 0), guard(LockLevel::Guard, 0);
  Guarded<int> numbering(LockLevel::Numbering, 0);
  step.with_lock([&](int&) {
    guard.with_lock([&](int&) { numbering.with_lock([](int& n) { ++n; }); });
  });
  EXPECT_EQ(numbering.with_lock([](int n) { return n; }), 1);
  EXPECT_TRUE(lock_order::held().empty());
}

TEST(GuardedLockOrder, TheWrongOrderIsRefusedBeforeItLocks) {
  Guarded<int> step(LockLevel::Step, 0), guard(LockLevel::Guard, 0);
  try {
    guard.with_lock([&](int&) { step.with_lock([](int& s) { ++s; }); });
    FAIL() << "the step's lock was taken under the guard's";
  } catch (const LockOrderError& e) {
    EXPECT_NE(std::string(e.what()).find("level 10 taken while one of level 20 is held"),
              std::string::npos)
        << e.what();
  }
  // Nothing was locked or changed, and both locks are free again.
  EXPECT_EQ(step.with_lock([](int s) { return s; }), 0);
  EXPECT_TRUE(lock_order::held().empty());
  // The same lock again on the same thread would deadlock: refused too.
  EXPECT_THROW(guard.with_lock([&](int&) { guard.with_lock([](int&) {}); }), LockOrderError);
}

TEST(GuardedLockOrder, EachThreadHasItsOwnLevels) {
  Guarded<int> step(LockLevel::Step, 0), guard(LockLevel::Guard, 0);
  guard.with_lock([&](int&) {
    // Another thread holds nothing: it may take the step's lock while this one holds the guard's.
    std::thread other([&] { step.with_lock([](int& s) { ++s; }); });
    other.join();
  });
  EXPECT_EQ(step.with_lock([](int s) { return s; }), 1);
}

}  // namespace
}  // namespace msprobe
