// The tool's messages, in the order they were said, for one deliverer at a time. Lines are said
// on threads that may not take the GIL (the autograd engine's, the dump writer's) while Python's
// logging needs it: each line is queued, and whichever thread delivers takes every line queued
// before and after its own until none is left, so the lines reach the logger in order even when
// the logger gives the GIL up while it writes.
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>

namespace msprobe {

// Python's logging levels, so that a line's severity crosses unchanged.
enum class LogLevel : int { Debug = 10, Info = 20, Warning = 30, Error = 40 };

struct Message {
  LogLevel level = LogLevel::Info;
  std::string text;
};

class MessageQueue {
 public:
  void post(Message message);
  // Hands every queued message to `deliver`, oldest first, until none is left. Returns at once
  // when another thread is delivering: that thread delivers these too. A message `deliver` throws
  // on is dropped and the exception passes on; the queue stays usable.
  void deliver(const std::function<void(const Message&)>& deliver);
  bool empty() const;

 private:
  mutable std::mutex mu_;
  std::deque<Message> queue_;
  // queue_.size(), read without the lock: most deliveries find nothing and take no lock. A line
  // posted as one looks is delivered by the next delivery, as one posted just after it would be.
  std::atomic<size_t> size_{0};
  std::atomic<bool> delivering_{false};  // one deliverer at a time
};

}  // namespace msprobe
