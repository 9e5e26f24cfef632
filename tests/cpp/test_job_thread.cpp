#include "core/job_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace msprobe {
namespace {

// A job that runs until released: the writer held behind a slow disk.
class Gate {
 public:
  std::function<void()> job(std::vector<int>& done, int id) {
    return [this, &done, id] {
      opened_.wait();
      done.push_back(id);
    };
  }
  void open() { open_.set_value(); }

 private:
  std::promise<void> open_;
  std::shared_future<void> opened_ = open_.get_future().share();
};

TEST(JobThread, RunsJobsInTheOrderPosted) {
  std::vector<int> done;
  JobThread jobs(2, nullptr, nullptr);
  for (int i = 0; i < 20; ++i) jobs.post([&done, i] { done.push_back(i); });
  jobs.drain();
  ASSERT_EQ(done.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(done[i], i);
  EXPECT_EQ(jobs.pending(), 0u);
}

TEST(JobThread, AtMostWaitingJobsWaitAndTheNextPostWaitsForRoomAndSaysSo) {
  std::vector<int> done;
  Gate gate;
  JobThread jobs(3, nullptr, nullptr);
  // One running (held) and three waiting: none of these posts waits.
  std::promise<void> started;
  EXPECT_FALSE(jobs.post([&] {
    started.set_value();
    gate.job(done, 0)();
  }));
  started.get_future().wait();
  for (int i = 1; i < 4; ++i) EXPECT_FALSE(jobs.post(gate.job(done, i)));
  ASSERT_EQ(jobs.pending(), 4u);
  std::atomic<bool> posted{false};
  std::future<bool> fifth = std::async(std::launch::async, [&] {
    const bool waited = jobs.post(gate.job(done, 4));
    posted = true;
    return waited;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(posted.load()) << "a fifth job was queued beside four";
  EXPECT_EQ(jobs.pending(), 4u);
  gate.open();
  EXPECT_TRUE(fifth.get());
  jobs.drain();
  EXPECT_EQ(done, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(JobThread, APollingThreadIsWokenOnlyOnceItHasGoneToSleep) {
  std::atomic<int> done{0};
  JobThread jobs(2, nullptr, nullptr,
                 JobPolling{std::chrono::microseconds(500), std::chrono::milliseconds(2000)});
  jobs.post([&] { ++done; });  // starts the thread: nothing to wake
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    jobs.post([&] { ++done; });
  }
  jobs.drain();
  EXPECT_EQ(done.load(), 21);
  EXPECT_EQ(jobs.wakeups(), 0u) << "posts while the thread polled woke it";

  JobThread brief(2, nullptr, nullptr,
                  JobPolling{std::chrono::microseconds(500), std::chrono::milliseconds(5)});
  brief.post([&] { ++done; });
  brief.drain();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // past its linger: asleep
  brief.post([&] { ++done; });
  brief.drain();
  EXPECT_EQ(done.load(), 23);
  EXPECT_EQ(brief.wakeups(), 1u);
}

TEST(JobThread, TheDestructorRunsEveryJobHandedOver) {
  std::vector<int> done;
  {
    JobThread jobs(8, nullptr, nullptr);
    for (int i = 0; i < 8; ++i) {
      jobs.post([&done, i] {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        done.push_back(i);
      });
    }
  }
  EXPECT_EQ(done.size(), 8u);
}

TEST(JobThread, AFailedJobIsReportedAndTheNextRuns) {
  std::vector<std::string> errors;
  std::vector<int> done;
  JobThread jobs(1, nullptr, [&](const std::string& what) { errors.push_back(what); });
  jobs.post([] { throw std::runtime_error("disk full"); });
  jobs.post([] { throw 7; });
  jobs.post([&] { done.push_back(1); });
  jobs.drain();
  EXPECT_EQ(errors, (std::vector<std::string>{"disk full", "an exception of unknown type"}));
  EXPECT_EQ(done, std::vector<int>{1});
}

TEST(JobThread, TheGuardLivesOnTheThreadWhileItRuns) {
  thread_local int marked = 0;
  std::atomic<int> made{0};
  std::vector<int> seen;
  {
    JobThread jobs(
        1,
        [&] {
          ++made;
          marked = 1;
          return std::shared_ptr<void>(static_cast<void*>(&made), [](void*) { marked = 0; });
        },
        nullptr);
    jobs.post([&] { seen.push_back(marked); });
    jobs.post([&] { seen.push_back(marked); });
    jobs.drain();
  }
  EXPECT_EQ(made.load(), 1);
  EXPECT_EQ(seen, (std::vector<int>{1, 1}));
  EXPECT_EQ(marked, 0) << "the posting thread is not the guarded one";
}

}  // namespace
}  // namespace msprobe
