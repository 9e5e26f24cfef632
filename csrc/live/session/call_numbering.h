// How a step numbers its calls: "<name>.<n>", n counted per name within the step, and the step's
// epoch, unique among all sessions' steps, so that hooks that count for themselves (API hooks)
// start again when it changes. The counters are this class's own, under its lock; the epoch is an
// atomic, read without it.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/guarded.h"

namespace msprobe {

class CallNumbering {
 public:
  explicit CallNumbering(uint64_t epoch) : epoch_(epoch) {}
  int64_t next_index(const std::string& key) {  // n of `key` within the step
    return counters_.with_lock([&](Counters& c) { return c.calls[key]++; });
  }
  // k of msprobe 26.x's "<module>.parameters_grad.<k>" when the gradient of `module`'s parameter
  // `param` arrives: the backward passes through the module within the step, a pass being over
  // when the parameter whose gradient came first comes again (as 26.x counts them).
  int64_t parameter_grad_index(const std::string& module, const std::string& param) {
    return counters_.with_lock([&](Counters& c) {
      auto [it, first] = c.grads.try_emplace(module, 0, param);
      if (!first && it->second.second == param) ++it->second.first;
      return it->second.first;
    });
  }
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  // A new step: its counters start at 0 and its calls carry `epoch`.
  void new_step(uint64_t epoch) {
    counters_.with_lock([&](Counters& c) {
      c.calls.clear();
      c.grads.clear();
      epoch_.store(epoch, std::memory_order_release);
    });
  }

 private:
  struct Counters {
    std::unordered_map<std::string, int64_t> calls;
    // module -> (k, the parameter whose gradient came first)
    std::unordered_map<std::string, std::pair<int64_t, std::string>> grads;
  };
  Guarded<Counters> counters_{LockLevel::Numbering};
  std::atomic<uint64_t> epoch_;
};

}  // namespace msprobe
