// msprobe 26.x's `slice` and `request_id` (docs/config.md): the part of each tensor a statistics
// or tensor dump describes and saves. The config's items are fixed; the request's rows are set
// at each start() (start(scheduled_tokens=...)), before that step's hooks run, and read by hooks
// on any thread.
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "core/msprobe26_keys.h"

namespace msprobe {

class TensorSlices {
 public:
  explicit TensorSlices(std::vector<SliceItem> items) : items_(std::move(items)) {}

  bool any() const { return !items_.empty() || request_end_.load(std::memory_order_acquire) > 0; }
  // `t` with every item applied in order, then the request's rows.
  at::Tensor apply(const at::Tensor& t) const;

  // This step's request: rows [begin, end) of a batch of `total` (dim 0); none when end is 0.
  void set_request(int64_t begin, int64_t end, int64_t total);
  void clear_request() { set_request(0, 0, 0); }

 private:
  const std::vector<SliceItem> items_;
  std::atomic<int64_t> request_begin_{0}, request_end_{0}, request_total_{0};
};

}  // namespace msprobe
