// How a step numbers its calls: "<name>.<n>", n counted per name within the step, and the step's
// epoch, unique among all sessions' steps, so that hooks that count for themselves (API hooks)
// start again when it changes. The counters are this class's own, under its lock; the epoch is an
// atomic, read without it.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "core/guarded.h"

namespace msprobe {

class CallNumbering {
 public:
  explicit CallNumbering(uint64_t epoch) : epoch_(epoch) {}
  int64_t next_index(const std::string& key) {  // n of `key` within the step
    return counters_.with_lock([&](Counters& c) { return c[key]++; });
  }
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  // A new step: its counters start at 0 and its calls carry `epoch`.
  void new_step(uint64_t epoch) {
    counters_.with_lock([&](Counters& c) {
      c.clear();
      epoch_.store(epoch, std::memory_order_release);
    });
  }

 private:
  using Counters = std::unordered_map<std::string, int64_t>;
  Guarded<Counters> counters_;
  std::atomic<uint64_t> epoch_;
};

}  // namespace msprobe
