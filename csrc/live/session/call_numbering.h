// How a step numbers its calls: "<name>.<n>", n counted per name within the step (the counters
// are the step's state, under its lock), and the step's epoch, unique among all sessions' steps,
// so that hooks that count for themselves (API hooks) start again when it changes. The epoch is
// an atomic, changed under the step's lock at a new step and read without it.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "core/guarded.h"
#include "live/session/step_state.h"

namespace msprobe {

class CallNumbering {
 public:
  CallNumbering(Guarded<StepState>& state, uint64_t epoch) : state_(state), epoch_(epoch) {}
  int64_t next_index(const std::string& key) {  // n of `key` within the step
    return state_.with_lock([&](StepState& s) { return s.counters[key]++; });
  }
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  void set_epoch(uint64_t epoch) { epoch_.store(epoch, std::memory_order_release); }

 private:
  Guarded<StepState>& state_;
  std::atomic<uint64_t> epoch_;
};

}  // namespace msprobe
