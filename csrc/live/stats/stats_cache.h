// Statistics computed once per tensor version within a step (live/stats/tensor_version_map.h
// says which tensor is the same), let go when the step moves on.
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>

#include "core/record.h"
#include "core/step_ticket.h"
#include "live/stats/tensor_version_map.h"

namespace msprobe {

// The part of a tensor's entry that depends on its data alone.
struct DataStats {
  Scalar max, min, mean, norm;
  FiniteExtremes finite;
  NonFiniteCounts nonfinite;
  std::string md5;
  int32_t pending_stats = -1;  // still on the device: the PendingStats slot (valid for the step)
};

// Thread-safe: its own mutex (hooks run on autograd and user threads too).
class StatsCache {
 public:
  // With `tickets`, what the last step cached is let go at the first look of the next (a
  // statistic still on the device names a slot that was the last step's).
  explicit StatsCache(const StepTickets* tickets = nullptr) : step_(tickets) {}

  // Whether `t` is one the cache holds: the caller builds no DataStats for any other.
  static bool cacheable(const at::Tensor& t);
  std::optional<DataStats> find(const at::Tensor& t);
  void put(const at::Tensor& t, const DataStats& stats);
  void clear();
  // `t`'s memory was written without a new version: an in-place collective writes its buffer
  // (all_reduce, broadcast; an asynchronous one at any time until it is waited for) and bumps no
  // version counter (both torches). No tensor on that storage is found or kept again this step.
  void written_without_version(const at::Tensor& t);

  // For tests and benchmarks.
  int64_t hits() const { return hits_.load(); }
  int64_t misses() const { return misses_.load(); }

 private:
  void clear_locked();

  std::mutex mu_;  // hooks run on autograd and user threads too
  StepLocal step_;
  TensorVersionMap<DataStats> items_;
  std::unordered_set<const void*> unversioned_;  // storages written_without_version this step
  std::atomic<int64_t> hits_{0}, misses_{0};
};

}  // namespace msprobe
