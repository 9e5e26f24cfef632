// Statistics computed once per tensor version within a step: an activation is one call's output
// and the next call's input, a weight is read by every call that uses it. The same tensor object
// at the same version, storage, offset, sizes and strides gets the statistics it got before; an
// in-place update (a new version), a view (another object) or anything else gets fresh ones.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/record.h"
#include "core/step_ticket.h"

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

  // Tensors smaller than this are cheaper to scan again than to look up.
  static constexpr int64_t kMinElements = 2048;

  // Whether `t` is one the cache holds: the caller builds no DataStats for any other.
  static bool cacheable(const at::Tensor& t);
  std::optional<DataStats> find(const at::Tensor& t);
  void put(const at::Tensor& t, const DataStats& stats);
  void clear();

  // For tests and benchmarks.
  int64_t hits() const { return hits_.load(); }
  int64_t misses() const { return misses_.load(); }

 private:
  using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  struct Item {
    WeakImpl weak;  // also keeps the address from being reused by another tensor
    uint32_t version;
    const void* storage;
    int64_t offset;
    // Inline up to six dimensions: two allocations a cached tensor fewer (issue 56).
    c10::SmallVector<int64_t, 6> sizes, strides;
    DataStats stats;
  };
  static bool same_layout(const Item& item, const at::Tensor& t);

  std::mutex mu_;  // hooks run on autograd and user threads too
  StepLocal step_;
  std::unordered_map<const c10::TensorImpl*, Item> items_;
  std::atomic<int64_t> hits_{0}, misses_{0};
  static constexpr size_t kMaxItems = 1 << 16;  // a bound on a step's memory, not a tuning knob
};

}  // namespace msprobe
