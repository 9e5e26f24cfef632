// Whether another rank stopped: set by the peer-stop watcher thread, read first by every hook.
// One atomic (release/acquire), no lock.
#pragma once

#include <atomic>

namespace msprobe {

// torch.distributed: another rank stopped. Set from the watcher thread; the hooks read it.
class PeerStopFlag {
 public:
  void set() { stopped_.store(true, std::memory_order_release); }
  bool stopped() const { return stopped_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> stopped_{false};
};

}  // namespace msprobe
