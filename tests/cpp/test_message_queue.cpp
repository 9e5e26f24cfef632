// MessageQueue: the order of the tool's lines across threads, one deliverer at a time.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/message_queue.h"

namespace msprobe {
namespace {

TEST(MessageQueue, DeliversInTheOrderSaid) {
  MessageQueue q;
  q.post({LogLevel::Info, "one"});
  q.post({LogLevel::Warning, "two"});
  std::vector<std::string> got;
  q.deliver([&](const Message& m) { got.push_back(m.text); });
  EXPECT_EQ(got, (std::vector<std::string>{"one", "two"}));
  EXPECT_TRUE(q.empty());
}

TEST(MessageQueue, LinesSaidWhileDeliveringAreDeliveredByTheDeliverer) {
  MessageQueue q;
  q.post({LogLevel::Info, "first"});
  std::vector<std::string> got;
  bool nested_returned_at_once = false;
  q.deliver([&](const Message& m) {
    got.push_back(m.text);
    if (m.text == "first") {
      // As when the logger gives the GIL up and another thread says a line and delivers.
      q.post({LogLevel::Error, "said meanwhile"});
      std::vector<std::string> nested;
      q.deliver([&](const Message& n) { nested.push_back(n.text); });
      nested_returned_at_once = nested.empty();
    }
  });
  EXPECT_TRUE(nested_returned_at_once);
  EXPECT_EQ(got, (std::vector<std::string>{"first", "said meanwhile"}));
}

TEST(MessageQueue, AThrowingDelivererDropsThatLineAndLeavesTheQueueUsable) {
  MessageQueue q;
  q.post({LogLevel::Info, "bad"});
  q.post({LogLevel::Info, "next"});
  EXPECT_THROW(q.deliver([](const Message&) { throw std::runtime_error("logger failed"); }),
               std::runtime_error);
  std::vector<std::string> got;
  q.deliver([&](const Message& m) { got.push_back(m.text); });
  EXPECT_EQ(got, (std::vector<std::string>{"next"}));
}

TEST(MessageQueue, EveryThreadsLinesArriveOnceInTheirOrderWithOneDelivererAtATime) {
  constexpr int kThreads = 4, kPerThread = 500;
  MessageQueue q;
  std::atomic<int> delivering{0};
  std::atomic<bool> overlapped{false};
  std::map<int, std::vector<int>> seen;  // written by one deliverer at a time
  auto deliver = [&](const Message& m) {
    if (delivering.fetch_add(1) != 0) overlapped = true;
    const size_t colon = m.text.find(':');
    seen[std::stoi(m.text.substr(0, colon))].push_back(std::stoi(m.text.substr(colon + 1)));
    delivering.fetch_sub(1);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        q.post({LogLevel::Info, std::to_string(t) + ":" + std::to_string(i)});
        q.deliver(deliver);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  q.deliver(deliver);  // a line posted as another thread's delivery ended
  EXPECT_FALSE(overlapped);
  ASSERT_EQ(seen.size(), static_cast<size_t>(kThreads));
  for (auto& [t, order] : seen) {
    ASSERT_EQ(order.size(), static_cast<size_t>(kPerThread)) << "thread " << t;
    for (int i = 0; i < kPerThread; ++i) EXPECT_EQ(order[i], i) << "thread " << t;
  }
}

}  // namespace
}  // namespace msprobe
