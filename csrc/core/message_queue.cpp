#include "core/message_queue.h"

namespace msprobe {

void MessageQueue::post(Message message) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(std::move(message));
  size_.store(queue_.size(), std::memory_order_release);
}

void MessageQueue::deliver(const std::function<void(const Message&)>& deliver) {
  // Most deliveries find nothing: they take no lock. The loop looks again after letting the
  // delivery go, so a line posted just as the last deliverer was done is not left behind.
  while (size_.load(std::memory_order_acquire) != 0) {
    if (delivering_.exchange(true, std::memory_order_acq_rel)) return;  // that thread takes it
    struct Release {
      std::atomic<bool>& delivering;
      ~Release() { delivering.store(false, std::memory_order_release); }
    } release{delivering_};
    while (size_.load(std::memory_order_acquire) != 0) {
      Message next;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (queue_.empty()) break;
        next = std::move(queue_.front());
        queue_.pop_front();
        size_.store(queue_.size(), std::memory_order_release);
      }
      // Not held while delivering: the deliverer may wait for the GIL, whose holder may be
      // saying a line itself.
      deliver(next);
    }
  }
}

bool MessageQueue::empty() const {
  return size_.load(std::memory_order_acquire) == 0;
}

}  // namespace msprobe
