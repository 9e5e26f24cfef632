#include "core/message_queue.h"

namespace msprobe {

void MessageQueue::post(Message message) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(std::move(message));
}

void MessageQueue::deliver(const std::function<void(const Message&)>& deliver) {
  std::unique_lock<std::mutex> lock(mu_);
  if (delivering_) return;
  delivering_ = true;
  struct Release {
    std::unique_lock<std::mutex>& lock;
    bool& delivering;
    ~Release() {
      if (!lock.owns_lock()) lock.lock();
      delivering = false;
    }
  } release{lock, delivering_};
  while (!queue_.empty()) {
    Message next = std::move(queue_.front());
    queue_.pop_front();
    // Not held while delivering: the deliverer may wait for the GIL, whose holder may be saying
    // a line itself.
    lock.unlock();
    deliver(next);
    lock.lock();
  }
}

bool MessageQueue::empty() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.empty();
}

}  // namespace msprobe
